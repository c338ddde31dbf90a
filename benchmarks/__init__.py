"""Benchmarks (not tests): `make bench`."""

import os

# The local dev stack's partition count, as the Makefile sets it, also when a benchmark
# is run directly (`python -m benchmarks.run`): the library default (24) is sized for
# production, and the dev stack's shared topics were created with 4.
os.environ.setdefault("ALC_TOPIC_PARTITIONS", "4")
