"""streams.drivers."""
