"""A second consumer driver for the same ``BatchProcessor``: aiokafka directly.

faust's per-event stream machinery bounds a no-op faust agent at ~6k events/s on our
2-core machines, while an aiokafka ``getmany`` loop reads ~160k/s (benchmarks/README.md).
This driver keeps every guarantee of the faust one — a batch is committed to PostgreSQL,
its publishes acknowledged, and only then its offsets committed — with no per-event
framework overhead. Select it with ``ALC_PROCESSOR_DRIVER=aiokafka``.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from schemas.settings import Settings
from storage.pool import create_pool
from streams.processor import RawMessage, build_processor, handle_or_exit

log = logging.getLogger("agentloom.processor")


class AioPublisher:
    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer
        self._pending: list[asyncio.Future[object]] = []

    async def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self._pending.append(await self.producer.send(topic, value, key=key))

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending:
            await asyncio.gather(*pending)


async def run(settings: Settings) -> None:
    pool = await create_pool(settings.pg_dsn, settings.pg_pool_min, settings.pg_pool_max)
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap, acks="all", enable_idempotence=True, linger_ms=2
    )
    consumer = AIOKafkaConsumer(
        settings.topic_records,
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=settings.processor_id,
        group_instance_id=settings.processor_instance_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=settings.processor_batch_max,
        session_timeout_ms=int(settings.processor_session_timeout_s * 1000),
        heartbeat_interval_ms=int(max(1.0, settings.processor_session_timeout_s / 4) * 1000),
    )
    await producer.start()
    await consumer.start()
    proc = build_processor(settings, pool, AioPublisher(producer))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "[direct-driver]: Ready, consuming %s as %s",
        settings.topic_records,
        settings.processor_instance_id,
    )
    try:
        while not stop.is_set():
            fetched = await consumer.getmany(
                timeout_ms=100, max_records=settings.processor_batch_max
            )
            if not fetched:
                continue
            batch: list[RawMessage] = []
            next_offsets: dict[TopicPartition, int] = {}
            for tp, msgs in fetched.items():  # per-partition order is what matters
                batch.extend(RawMessage(m.key, m.value, m.partition, m.offset) for m in msgs)
                next_offsets[tp] = msgs[-1].offset + 1
            await handle_or_exit(proc, batch, settings.processor_transient_retry_s)
            # Only after the database commit and the acknowledged publishes.
            await consumer.commit(next_offsets)
    finally:
        await consumer.stop()  # leaves the group: partitions move at once
        await producer.stop()
        await pool.close()
