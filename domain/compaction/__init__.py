"""domain.compaction."""
