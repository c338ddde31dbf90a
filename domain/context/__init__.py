"""domain.context."""
