"""faust-streaming wiring of the session processor.

Kept thin: the agent takes batches and hands them to ``BatchProcessor`` (built by
``streams.bootstrap``). Choices that matter for correctness (see DESIGN.md "Known traps"):
- ``concurrency=1``: with more, faust can commit an offset past an in-flight message
  (faust-streaming #606).
- ``take_events`` acks a batch in a ``finally`` once the loop body returns — and also if
  the body raises. So the body never raises: a record it cannot apply is dead-lettered
  (``BatchProcessor.handle``), and when the infrastructure stays lost the process exits
  at once (crash-only) before faust can ack, and the batch is redelivered on restart.
- no ``exactly_once`` guarantee from faust (#517, #323): effectively-once comes from
  PostgreSQL unique keys and the consumer tracking rows written with the effects.

With tracing on, each traced message's ``processor.commit`` span is open while its
batch is handled (``streams.tracing``); off, no header is read.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import faust

from domain.context.envelope import envelope_headers
from schemas.settings import Settings
from streams import metrics, tracing
from streams.drivers.in_loop import consume_in_loop
from streams.drivers.pipelined import PipelinedBatches, ticking
from streams.kafka.auth import kafka_auth
from streams.processor import RawMessage

# Batches in flight to the offloaded processor: one applying, one whose first chunk the
# child admits meanwhile, one more so that faust keeps reading through the child's waits
# on PostgreSQL and the broker (2 in flight: 0.78-0.81 of the no-op agent; 3: 0.85-0.88).
OFFLOAD_DEPTH = 3

# Applies a batch — committed and published when it returns — or ends the process.
BatchHandler = Callable[[list[RawMessage]], Awaitable[object]]
# Builds the handler once faust runs (its producer exists only then).
HandlerFactory = Callable[[faust.App], Awaitable[BatchHandler]]


def create_app(settings: Settings, data_dir: Path, build: HandlerFactory) -> faust.App:
    app = _app(settings, data_dir)
    records = app.topic(
        settings.topic_records,
        value_type=bytes,
        key_type=bytes,
        partitions=settings.topic_partitions,
    )
    app.topic(settings.topic_committed, partitions=settings.topic_partitions)
    app.topic(settings.topic_dead_letter, partitions=settings.topic_partitions)
    built: list[BatchHandler] = []

    async def apply(events: list[Any]) -> None:
        batch = [
            RawMessage(
                e.message.key,
                e.message.value,
                e.message.partition,
                e.message.offset,
                envelope_headers(e.message.headers),
            )
            for e in events
        ]
        if not built:  # lazily, as before: the pool is opened by the first batch
            built.append(await build(app))
        traced = tracing.carried(e.message for e in events) if tracing.enabled() else []
        started = time.perf_counter()
        with tracing.commit_spans(traced, len(batch)):
            await built[0](batch)
        _observe(app, events, time.perf_counter() - started, settings.processor_id)

    @app.agent(records, concurrency=1)
    async def session_processor(stream: Any) -> None:
        if settings.processor_offload:
            # The processor runs in a child process: keep reading while it applies.
            if not built:  # now: batches must reach the child in the order they are cut
                built.append(await build(app))
            manual = stream.noack()
            batches = PipelinedBatches(
                apply,
                manual.ack,
                settings.processor_batch_max,
                settings.processor_batch_within_s,
                depth=OFFLOAD_DEPTH,
            )
            async with ticking(batches):
                async for event in manual.events():
                    await batches.add(event)
                await batches.drain()
            return
        async for events in stream.take_events(
            settings.processor_batch_max, within=settings.processor_batch_within_s
        ):
            await apply(events)

    return app


def _app(settings: Settings, data_dir: Path) -> faust.App:
    app = faust.App(
        settings.processor_id,
        broker=f"kafka://{settings.kafka_bootstrap}",
        broker_credentials=kafka_auth(settings, "processor").faust_credentials(),
        store="memory://",
        value_serializer="raw",
        key_serializer="raw",
        topic_partitions=settings.topic_partitions,
        web_enabled=False,
        producer_acks=-1,
        consumer_auto_offset_reset="earliest",
        datadir=str(data_dir),
        broker_commit_every=settings.processor_batch_max,
        broker_commit_interval=0.5,
        # Static membership: a restarted processor (crash, kill -9, deploy) takes its
        # partitions back at once instead of waiting out the dead member's session.
        consumer_group_instance_id=settings.processor_instance_id,
        broker_session_timeout=settings.processor_session_timeout_s,
        broker_heartbeat_interval=max(1.0, settings.processor_session_timeout_s / 4),
    )
    if not settings.processor_consumer_thread:
        consume_in_loop(app)
    return app


def _observe(app: faust.App, events: list[Any], seconds: float, group: str) -> None:
    """Metrics of a handled batch (faust's message timestamps are in seconds)."""
    ends: dict[Any, int] = {}
    for e in events:
        ends[e.message.tp] = e.message.offset + 1
    metrics.observe_batch(
        len(events),
        seconds,
        [int((e.message.timestamp or 0) * 1000) for e in events],
        {tp.partition: (app.consumer.highwater(tp) or end) - end for tp, end in ends.items()},
        group,
    )
