"""Traces through the real stack (issue 12 item 5, SPEC R18): one trace links the SDK's
append, the processor's commit of that event and Prepare's answer.

The processor (aiokafka driver) and Prepare run in this process, on their own topics,
consumer group and the session's database, so that their spans reach the in-memory
exporter; Kafka and PostgreSQL are the real ones. The trace context crosses Kafka in the
event's headers and HTTP in ``traceparent``, exactly as between processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from domain.auth import KeyKind
from schemas.settings import Settings
from services.prepare.bootstrap import running_service
from services.prepare.http.api import create_api
from services.sdk.client import ContextClient
from storage.api_keys import issue
from storage.pool import create_pool
from streams import tracing
from streams.drivers import direct
from streams.kafka.auth import kafka_auth
from streams.kafka.bus_secrets import issuer_secret
from streams.kafka.provision import provision
from streams.kafka.publish import AiokafkaPublisher
from streams.wiring import build_processor
from tests.support.flows import new_session
from tests.support.services import TEST_SPACE, services_env, settings_of
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.spec("R18")]


@asynccontextmanager
async def processor(settings: Settings) -> AsyncIterator[None]:
    """The session processor's aiokafka driver as a task; on exit it finishes the batch
    in hand (its spans end) and leaves the group."""
    pool = await create_pool(settings.pg_dsn, 1, 4)
    publisher = AiokafkaPublisher(settings.kafka_bootstrap, kafka_auth(settings, "processor"))
    consumer = direct.make_consumer(settings)
    await publisher.start()
    await consumer.start()
    stop = asyncio.Event()
    task = asyncio.create_task(
        direct.consume(
            consumer,
            build_processor(settings, pool, publisher),
            stop,
            settings.processor_batch_max,
            settings.processor_transient_retry_s,
        )
    )
    try:
        yield
    finally:
        stop.set()
        await task
        await consumer.stop()
        await publisher.stop()
        await pool.close()


@asynccontextmanager
async def prepare_and_processor(settings: Settings) -> AsyncIterator[FastAPI]:
    async with running_service(settings) as svc, processor(settings):
        yield create_api(svc, settings)


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    named = [s for s in spans if s.name == name]
    assert len(named) == 1, f"{name}: {[s.name for s in spans]}"
    return named[0]


def parent_of(child: ReadableSpan, parent: ReadableSpan) -> bool:
    assert child.parent is not None and child.context is not None
    assert parent.context is not None
    return bool(
        child.context.trace_id == parent.context.trace_id
        and child.parent.span_id == parent.context.span_id
    )


async def test_one_trace_links_append_commit_and_prepare(stack: Stack, pg_dsn: str) -> None:
    env = services_env(stack, pg_dsn) | {"ALC_PREPARE_COMMIT_WAIT_S": "60"}
    await provision(settings_of(env))
    settings = Settings(**{k[4:].lower(): v for k, v in env.items()})  # type: ignore[arg-type]
    exporter = InMemorySpanExporter()
    tracing.install(exporter, "tests", batch=False)
    try:
        async with prepare_and_processor(settings) as app:
            issuer = issuer_secret(settings)
            key = await issue(pg_dsn, TEST_SPACE, KeyKind.HOST, label="tests", issuer=issuer)
            async with ContextClient(
                settings.kafka_bootstrap,
                "http://prepare.test",
                topic=settings.topic_records,
                api_key=key.key,
                http_transport=httpx.ASGITransport(app=app),
            ) as c:
                run = await c.start_run(await new_session(c))
                with tracing.tracer().start_as_current_span("runtime.turn") as turn:
                    partition, offset = await c.append_user(run, "Where is the config?", "q1")
                    prepared = await c.prepare(run)
        spans = exporter.get_finished_spans()
    finally:
        tracing.reset()

    root = by_name(spans, "runtime.turn")
    append = by_name(spans, tracing.APPEND_SPAN)
    commit = by_name(spans, tracing.COMMIT_SPAN)  # the run start was not traced
    asked = by_name(spans, tracing.PREPARE_CLIENT_SPAN)
    answer = by_name(spans, tracing.PREPARE_SPAN)
    assert root.context is not None and root.context == turn.get_span_context()
    assert parent_of(append, root)
    assert parent_of(commit, append)
    assert parent_of(asked, root)
    assert parent_of(answer, asked)

    # The commit span is that event's: its partition and offset.
    assert commit.attributes is not None
    assert commit.attributes["messaging.destination.partition.id"] == str(partition)
    assert commit.attributes["messaging.kafka.offset"] == offset
    assert answer.attributes is not None
    assert answer.attributes["agentloom.prepared_id"] == prepared["prepared_id"]
    assert answer.attributes["agentloom.outcome"] == "ok"
    # Prepare answered after the commit it waited for had begun (read-your-writes).
    assert commit.start_time is not None and answer.end_time is not None
    assert commit.start_time <= answer.end_time
