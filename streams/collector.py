"""The cyclic garbage collector: the young-generation threshold every service sets at
start (``Settings.gc_young_threshold``), and the collector paused while a large
structure that will be kept is built (``built_to_keep``).

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
from collections.abc import Iterator
from contextlib import contextmanager


def tune_collector(young_threshold: int) -> None:
    """Collect the youngest generation after ``young_threshold`` net allocations; the
    older generations keep their default ratios."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)


@contextmanager
def built_to_keep() -> Iterator[None]:
    """What Prepare's startup hands to ``render_state.load`` (``services.prepare.bootstrap``).
    Loading allocates a few objects per record and frees none: the cyclic collector
    would scan the growing heap again and again for nothing (a fifth of a cold load), so
    it is paused. What was built is then promoted straight to the oldest generation
    (freeze, then unfreeze: two list splices, no scan) instead of being scanned by the
    young collections that would follow (another fifth). Garbage cycles promoted with it
    are still collected, by the next full collection."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if paused:
            gc.enable()
