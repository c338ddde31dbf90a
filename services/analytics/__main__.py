"""Entry point: ``agentloom-analytics`` (or ``python -m services.analytics``).

Its own consumer group on ``ctx.observability`` and the dead-letter topic. A plain
aiokafka ``getmany`` loop rather than a faust agent: the work per batch is one PostgreSQL
transaction (increments + tracking offsets), so faust's per-event stream machinery would
only cost throughput (streams/drivers/direct.py, benchmarks/README.md) and its table/changelog
state is not wanted — PostgreSQL holds the state. Offsets are committed to Kafka after
the database commit; a crash in between redelivers messages the tracking rows skip.
The loop itself (decode and sum the next batch while the previous one is written) is
``pipeline.py``.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import uvloop
from aiokafka import AIOKafkaConsumer

from schemas.settings import Settings
from services import metrics
from services.analytics.pipeline import FLUSH_WITHIN_S, Pipeline
from storage.migrate import apply_dsn
from storage.pool import create_pool
from storage.roles import configured_dsn, dsn_of
from streams.kafka.auth import kafka_auth
from streams.kafka.topics import require_topics
from streams.tuning.collector import tune_collector
from streams.tuning.cpu_policy import apply_cpu_policy

log = logging.getLogger("agentloom.analytics")
READY = "[analytics]: Ready"
FETCH_MIN_BYTES = 1 << 20


def consumer_of(settings: Settings) -> AIOKafkaConsumer:
    """The analytics group's consumer (also used by the benchmark)."""
    return AIOKafkaConsumer(
        settings.topic_observability,
        settings.topic_dead_letter,
        bootstrap_servers=settings.kafka_bootstrap,
        **kafka_auth(settings, "analytics").client_kwargs(),
        group_id=settings.analytics_group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=settings.analytics_batch_max,
        # Rollups may lag by a batch's wait (pipeline.FLUSH_WITHIN_S): the broker answers
        # a fetch once a MiB has gathered or that wait passed, instead of once for every
        # observation as it arrives (each one a round trip the broker pays for).
        fetch_min_bytes=FETCH_MIN_BYTES,
        fetch_max_wait_ms=int(FLUSH_WITHIN_S * 1000),
    )


async def run(settings: Settings) -> None:
    await apply_dsn(configured_dsn(settings))
    await require_topics(settings, "analytics")
    # Two connections: one writes a batch while the other looks up new sessions' dimensions.
    pool = await create_pool(  # its own login
        dsn_of(settings, "analytics"), 1, 2, plan_cache_mode=settings.pg_plan_cache_mode
    )
    if settings.metrics_port is not None:
        metrics.serve(settings.metrics_port)
    consumer = consumer_of(settings)
    await consumer.start()
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
        await Pipeline(settings, pool, consumer).run(stop)
    finally:
        await consumer.stop()
        await pool.close()


def main() -> None:
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    # Rollups may lag a little; a prepare must not wait for them (the core's prepare p99
    # with the analytics group running within 1.1 of without, on shared cores; nice 10
    # alone left it at 1.2-1.3, the SCHED_IDLE policy at ~1.05).
    apply_cpu_policy(settings.analytics_cpu)
    tune_collector(settings.gc_young_threshold)
    uvloop.run(run(settings))


if __name__ == "__main__":
    main()
