"""A large prepared context stored as what it adds to its thread's last one (R10.5).

Every prepare stores its whole context for the gateway's final check. A long thread's
consecutive contexts share all but their last messages, and their stored form starts
with the messages (``PreparedEntry.to_json``): so a context whose body begins with most
of the body of one stored whole before it in its thread is stored as the rest, naming
that one as its base (``storage.calls.prepared_contexts``: readers rebuild it in SQL).

A base is a context stored whole, known stored (its write committed) and younger than
``max_age_s`` (``base_age``: at most half the contexts' retention, so that no delta is
written naming a base pruning may already have deleted); pruning keeps a base while a
context younger than the retention names it. Bases are kept per thread and purpose,
bounded by the bytes they hold.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

DELTA_MIN_BYTES = 64 << 10  # a smaller body is stored whole (and is never a base)
BASE_MAX_AGE_S = 600.0
# A body is stored as a delta when at least this share of it is its base's.
SHARED_MIN = 0.5
_CHUNK = 1 << 16

Thread = tuple[str, str, str, str]  # session, run, instance, purpose


@dataclass(frozen=True)
class Delta:
    base_id: str
    shared: int  # the bytes of the base's body that come first


@dataclass(frozen=True)
class _Base:
    prepared_id: str
    body: bytes
    at: float  # when its write committed (monotonic seconds)


def shared_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of ``a`` and ``b``: compared a chunk at a
    time (each a memcmp), then halved within the first chunk that differs."""
    n = min(len(a), len(b))
    lo = 0
    while lo < n:
        hi = min(lo + _CHUNK, n)
        if a[lo:hi] != b[lo:hi]:
            break
        lo = hi
    else:
        return n
    # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def base_age(retention_s: float) -> float:
    """How old a base a delta may name, for contexts kept ``retention_s``: a base is pruned
    once no context younger than the retention names it, so one at most half the
    retention old is never gone when its delta is written."""
    return min(BASE_MAX_AGE_S, retention_s / 2)


class Bases:
    """Each thread's last context stored whole (large enough to be a base)."""

    def __init__(self, limit_bytes: int = 64 << 20, max_age_s: float = BASE_MAX_AGE_S) -> None:
        self.limit_bytes = limit_bytes
        self.max_age_s = max_age_s
        self.held = 0
        self._bases: OrderedDict[Thread, _Base] = OrderedDict()

    def delta(self, thread: Thread, body: bytes, now: float) -> Delta | None:
        """How ``body`` may be stored against its thread's base, or None: stored whole."""
        base = self._bases.get(thread)
        if base is None or len(body) < DELTA_MIN_BYTES or now - base.at > self.max_age_s:
            return None
        shared = shared_prefix(base.body, body)
        if shared < SHARED_MIN * len(body):
            return None
        self._bases.move_to_end(thread)
        return Delta(base.prepared_id, shared)

    def stored(self, thread: Thread, prepared_id: str, body: bytes, now: float) -> None:
        """``body`` was stored whole (its write committed): the thread's base from now."""
        if len(body) < DELTA_MIN_BYTES or len(body) > self.limit_bytes:
            return
        old = self._bases.pop(thread, None)
        if old is not None:
            self.held -= len(old.body)
        self._bases[thread] = _Base(prepared_id, body, now)
        self.held += len(body)
        while self.held > self.limit_bytes:
            _, gone = self._bases.popitem(last=False)
            self.held -= len(gone.body)
