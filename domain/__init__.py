"""Pure decision logic: no asyncio, Kafka or SQL imports (tests/unit/test_purity.py)."""
