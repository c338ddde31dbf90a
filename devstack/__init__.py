import os

# The local dev stack's partition count, as the Makefile sets it, also for
# `python -m devstack.demo` run directly (the library default, 24, is for production).
os.environ.setdefault("ALC_TOPIC_PARTITIONS", "4")
