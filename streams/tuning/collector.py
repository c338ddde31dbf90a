"""The cyclic garbage collector's young-generation threshold, set by every service at
start (``Settings.gc_young_threshold``).

CPython collects its youngest generation after every 700 net container allocations by
default. A collection visits every reference held by a young container, and a prepare
of a long thread makes a few new lists of its thousands of messages (each visit a cache
miss on a message far away in memory): at 10k records one such collection took ~3 ms,
about once a prepare, inside the prepare's latency. At 20,000 allocations the young
generation is collected ~30 times less often and each collection finds about the same
live objects (what a finished request allocated is freed by reference counting, not by
the collector); cyclic garbage waits at most that many allocations longer.
"""

from __future__ import annotations

import gc


def tune_collector(young_threshold: int) -> None:
    """Collect the youngest generation after ``young_threshold`` net allocations; the
    older generations keep their default ratios."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)
