"""storage.compaction.summaries."""
