"""Compaction summarizers (R11.3): the model gateway port, its adapters and validation."""
