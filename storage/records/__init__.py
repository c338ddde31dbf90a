"""storage.records."""
