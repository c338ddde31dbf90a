"""A second consumer driver for the same ``BatchProcessor``: aiokafka directly.

faust's per-event stream machinery bounds a no-op faust agent at ~6k events/s on our
2-core machines, while an aiokafka ``getmany`` loop reads ~160k/s (benchmarks/README.md).
This driver keeps every guarantee of the faust one — a batch is committed to PostgreSQL,
its publishes acknowledged, and only then its offsets committed — with no per-event
framework overhead. Select it with ``ALC_PROCESSOR_DRIVER=aiokafka``; it is wired in
``streams.bootstrap``.

With tracing on, each traced message's ``processor.commit`` span is open while its
batch is handled (``streams.tracing``); off, no header is read.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka import AIOKafkaConsumer, TopicPartition

from domain.context.envelope import envelope_headers
from schemas.settings import Settings
from streams import metrics, tracing
from streams.crash_only import handle_or_exit
from streams.kafka.auth import kafka_auth
from streams.processor import BatchProcessor, RawMessage

log = logging.getLogger("agentloom.processor")


def make_consumer(settings: Settings) -> AIOKafkaConsumer:
    """The records consumer: manual commits (offsets follow the database commit), static
    membership (a restarted process takes its partitions back at once)."""
    return AIOKafkaConsumer(
        settings.topic_records,
        bootstrap_servers=settings.kafka_bootstrap,
        **kafka_auth(settings, "processor").client_kwargs(),
        group_id=settings.processor_id,
        group_instance_id=settings.processor_instance_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=settings.processor_batch_max,
        session_timeout_ms=int(settings.processor_session_timeout_s * 1000),
        heartbeat_interval_ms=int(max(1.0, settings.processor_session_timeout_s / 4) * 1000),
    )


async def consume(
    consumer: AIOKafkaConsumer,
    proc: BatchProcessor,
    stop: asyncio.Event,
    batch_max: int,
    transient_retry_s: float,
) -> None:
    """Batches from ``consumer`` to ``proc`` until ``stop`` is set."""
    while not stop.is_set():
        fetched = await consumer.getmany(timeout_ms=100, max_records=batch_max)
        if not fetched:
            continue
        batch: list[RawMessage] = []
        next_offsets: dict[TopicPartition, int] = {}
        for tp, msgs in fetched.items():  # per-partition order is what matters
            batch.extend(
                RawMessage(m.key, m.value, m.partition, m.offset, envelope_headers(m.headers))
                for m in msgs
            )
            next_offsets[tp] = msgs[-1].offset + 1
        traced = (
            tracing.carried(m for msgs in fetched.values() for m in msgs)
            if tracing.enabled()
            else []
        )
        started = time.perf_counter()
        with tracing.commit_spans(traced, len(batch)):
            await handle_or_exit(proc, batch, transient_retry_s)
        # Only after the database commit and the acknowledged publishes.
        await consumer.commit(next_offsets)
        metrics.observe_batch(
            len(batch),
            time.perf_counter() - started,
            [m.timestamp for msgs in fetched.values() for m in msgs],
            {
                tp.partition: (consumer.highwater(tp) or end) - end
                for tp, end in next_offsets.items()
            },
            proc.config.consumer,
        )
