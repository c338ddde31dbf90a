"""Entry point: ``agentloom-analytics`` (or ``python -m services.analytics``).

Its own consumer group on ``ctx.observability`` and the dead-letter topic. A plain
aiokafka ``getmany`` loop rather than a faust agent: the work per batch is one PostgreSQL
transaction (increments + tracking offsets), so faust's per-event stream machinery would
only cost throughput (streams/direct.py, benchmarks/README.md) and its table/changelog
state is not wanted — PostgreSQL holds the state. Offsets are committed to Kafka after
the database commit; a crash in between redelivers messages the tracking rows skip.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import replace

import asyncpg
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord

from schemas.rollup import (
    Dims,
    Fact,
    dead_letter_increments,
    observability_increments,
)
from schemas.settings import Settings
from schemas.wire import decode_dead_letter, decode_observability
from services import metrics
from storage import analytics as store
from storage.migrate import apply_dsn
from storage.pool import create_pool
from streams.topics import require_topics

log = logging.getLogger("agentloom.analytics")
READY = "[analytics]: Ready"


def _decode(settings: Settings, msg: ConsumerRecord[bytes, bytes]) -> tuple[str, Fact] | None:
    """(session id, fact without dimensions) of a message, or None when it adds nothing."""
    try:
        if msg.topic == settings.topic_dead_letter:
            dl = decode_dead_letter(msg.value or b"")
            return dl.session_id or "", Fact(dl.failed_at_ms, Dims(), dead_letter_increments(dl))
        ev = decode_observability(msg.value or b"")
    except Exception:  # an unreadable message must not stop the rollups; it is skipped
        log.warning("skipping undecodable %s[%d]@%d", msg.topic, msg.partition, msg.offset)
        return None
    incs = observability_increments(ev)
    return (ev.session_id, Fact(ev.occurred_at_ms, Dims(purpose=ev.purpose or ""), incs))


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


def _observe(settings: Settings, topic: str, fact: Fact | None) -> None:
    kind = "dead_letter" if topic == settings.topic_dead_letter else "observability"
    metrics.ANALYTICS_EVENTS.labels(kind, "skipped" if fact is None else "read").inc()
    for inc in fact.increments if fact else ():
        if inc.metric == "dead_letters":
            metrics.DEAD_LETTERS.labels(inc.label).inc()
        elif inc.metric == "compactions":
            metrics.COMPACTION_JOBS.labels(inc.label).inc()


async def handle(
    settings: Settings,
    pool: asyncpg.Pool,
    dims: Dimensions,
    msgs: list[ConsumerRecord[bytes, bytes]],
) -> int:
    decoded = [(m, _decode(settings, m)) for m in msgs]
    known = await dims.resolve({d[0] for _, d in decoded if d is not None})
    batch = []
    for m, d in decoded:
        fact = None
        if d is not None:
            sid, f = d
            fact = replace(f, dims=replace(known.get(sid, Dims()), purpose=f.dims.purpose))
        batch.append(store.Consumed(m.topic, m.partition, m.offset, fact))
        _observe(settings, m.topic, fact)
    return await store.apply(pool, settings.analytics_group, batch)


async def run(settings: Settings) -> None:
    await apply_dsn(settings.pg_dsn)
    await require_topics(settings)
    pool = await create_pool(settings.pg_dsn, 1, 2)
    if settings.metrics_port is not None:
        metrics.serve(settings.metrics_port)
    consumer = AIOKafkaConsumer(
        settings.topic_observability,
        settings.topic_dead_letter,
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=settings.analytics_group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=settings.analytics_batch_max,
    )
    await consumer.start()
    dims = Dimensions(pool)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "%s, consuming %s and %s as %s",
        READY,
        settings.topic_observability,
        settings.topic_dead_letter,
        settings.analytics_group,
    )
    try:
        while not stop.is_set():
            fetched = await consumer.getmany(
                timeout_ms=200, max_records=settings.analytics_batch_max
            )
            if not fetched:
                continue
            msgs = [m for part in fetched.values() for m in part]
            new = await handle(settings, pool, dims, msgs)
            # Only after the database commit: a crash before this redelivers the batch,
            # and the tracking offsets make the redelivery change nothing.
            await consumer.commit({tp: part[-1].offset + 1 for tp, part in fetched.items() if part})
            log.debug("applied %d of %d messages", new, len(msgs))
    finally:
        await consumer.stop()
        await pool.close()


def main() -> None:
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    asyncio.run(run(settings))


if __name__ == "__main__":
    main()
