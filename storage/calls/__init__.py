"""storage.calls."""
