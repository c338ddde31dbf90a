"""What the analytics group gathers before one transaction: the consumed messages, in
order, decoded fetch by fetch while the previous transaction is being written, and their
increments summed once per transaction (``domain.rollup.rollup``).

A transaction that covers several fetches writes each rollup row once instead of once
per fetch (a 1m window's histogram rows recur in every fetch), and sums each key once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Iterable
from typing import TypeAlias

import asyncpg
from aiokafka.structs import ConsumerRecord

from domain.rollup import Dims, Fact, RollupKey, attributed, dead_letter_increments, rollup
from domain.rollup import observability_increments as increments_of
from schemas.wire import decode_dead_letter, decode_observability
from services import metrics
from storage import analytics as store

log = logging.getLogger("agentloom.analytics")

Message: TypeAlias = ConsumerRecord[bytes, bytes]
DECODE_CHUNK = 200  # messages decoded between two turns of the event loop


class Dimensions:
    """Session → dimensions, cached: they are fixed when the session is opened."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.cache: dict[str, Dims] = {}

    async def resolve(self, session_ids: set[str]) -> dict[str, Dims]:
        missing = [s for s in session_ids if s and s not in self.cache]
        if missing:
            self.cache.update(await store.session_dims(self.pool, missing))
            if len(self.cache) > 100_000:
                self.cache.clear()
        return {s: self.cache.get(s, Dims()) for s in session_ids}


def decode(dead_letter_topic: str, msg: Message) -> tuple[str, Fact] | None:
    """(session id, fact without its session's dimensions) of a message, or None when it
    adds nothing."""
    try:
        if msg.topic == dead_letter_topic:
            dl = decode_dead_letter(msg.value or b"")
            return (
                dl.session_id or "",
                Fact(dl.failed_at_ms, Dims(space_id=dl.space_id or ""), dead_letter_increments(dl)),
            )
        ev = decode_observability(msg.value or b"")
    except Exception:  # an unreadable message must not stop the rollups; it is skipped
        log.warning("skipping undecodable %s[%d]@%d", msg.topic, msg.partition, msg.offset)
        return None
    dims = Dims(space_id=ev.space_id or "", purpose=ev.purpose or "")
    return ev.session_id, Fact(ev.occurred_at_ms, dims, increments_of(ev))


class Batch:
    """Messages consumed since the last transaction, with their increments summed."""

    def __init__(self, dead_letter_topic: str) -> None:
        self.dead_letter_topic = dead_letter_topic
        self.consumed: list[store.Consumed] = []
        self.facts: list[Fact] = []
        # Last offset + 1 per (topic, partition): what Kafka is told after the commit.
        self.offsets: dict[tuple[str, int], int] = {}
        self.opened = 0.0  # time.monotonic() of the first message added

    def __len__(self) -> int:
        return len(self.consumed)

    def sums(self) -> dict[RollupKey, int]:
        """Every fact's increments, summed per window, dimensions, metric and label."""
        return rollup(self.facts)

    async def add(self, msgs: list[Message], dims: Dimensions) -> None:
        if not self.consumed:
            self.opened = time.monotonic()
        decoded: list[tuple[Message, tuple[str, Fact] | None]] = []
        for start in range(0, len(msgs), DECODE_CHUNK):
            chunk = msgs[start : start + DECODE_CHUNK]
            decoded += [(m, decode(self.dead_letter_topic, m)) for m in chunk]
            # Let the write in flight take its next round trip: a fetch decoded in one go
            # held each of the write's ~9 round trips back by a whole fetch's decoding.
            await asyncio.sleep(0)
        known = await dims.resolve({d[0] for _, d in decoded if d is not None})
        # One Dims per (session, signer's space, purpose): the rollup hashes each fact's
        # dimensions. A fact that names its signer's space counts there, under its
        # session's dimensions only when the session is of that space (attributed).
        full: dict[tuple[str, str, str], Dims] = {}
        facts, consumed = [], []
        for m, d in decoded:
            fact = None
            if d is not None:
                sid, f = d
                key = (sid, f.dims.space_id, f.dims.purpose)
                if key not in full:
                    full[key] = attributed(known.get(sid, Dims()), key[1] or None, key[2])
                fact = Fact(f.at_ms, full[key], f.increments)
                facts.append(fact)
            consumed.append(store.Consumed(m.topic, m.partition, m.offset, fact))
            self.offsets[(m.topic, m.partition)] = m.offset + 1
        self.consumed += consumed
        self.facts += facts
        _observe(self.dead_letter_topic, consumed)


def _observe(dead_letter_topic: str, consumed: Iterable[store.Consumed]) -> None:
    """Prometheus counters of one fetch, incremented once per label set (not per event)."""
    events: Counter[tuple[str, str]] = Counter()
    dead: Counter[str] = Counter()
    jobs: Counter[str] = Counter()
    for c in consumed:
        kind = "dead_letter" if c.topic == dead_letter_topic else "observability"
        events[(kind, "skipped" if c.fact is None else "read")] += 1
        for inc in c.fact.increments if c.fact else ():
            if inc.metric == "dead_letters":
                dead[inc.label] += 1
            elif inc.metric == "compactions":
                jobs[inc.label] += 1
    for labels, n in events.items():
        metrics.ANALYTICS_EVENTS.labels(*labels).inc(n)
    for reason, n in dead.items():
        metrics.DEAD_LETTERS.labels(reason).inc(n)
    for outcome, n in jobs.items():
        metrics.COMPACTION_JOBS.labels(outcome).inc(n)
