"""streams.kafka."""
