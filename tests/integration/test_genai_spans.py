"""GenAI spans through the real stack (issue 39 item 7, R18): a runtime's model call,
reported to Prepare, and a compaction's summarizer call are spans in the GenAI semantic
conventions, read back from an in-memory exporter with their exact token counts.

Prepare, the processor (aiokafka driver) and the compaction service run in this process
(as in ``test_tracing``), so that their spans reach the exporter; Kafka, PostgreSQL and
the summarizer's OpenAI-compatible HTTP endpoint (a scripted model) are real.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from domain.auth import KeyKind
from schemas.settings import Settings
from services.compaction import bootstrap as compaction
from services.compaction.consume import consume_until
from services.sdk.client import ContextClient
from storage.api_keys import issue
from storage.pool import create_pool
from streams import tracing
from streams.kafka.bus_secrets import issuer_secret
from streams.kafka.provision import provision
from tests.integration.test_compaction import question, settled
from tests.integration.test_tracing import prepare_and_processor
from tests.support.flows import PROFILE, new_session
from tests.support.model_server import model_server
from tests.support.services import TEST_SPACE, services_env, settings_of
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.spec("R18")]

PRICES = {"input": 3, "cached_input": 0.3, "cache_write": 3.75, "output": 15}
ANTHROPIC_USAGE = {
    "input_tokens": 120,
    "cache_read_input_tokens": 2048,
    "cache_creation_input_tokens": 256,
    "output_tokens": 40,
}
SUMMARIZER_USAGE = {
    "prompt_tokens": 900,
    "completion_tokens": 70,
    "prompt_tokens_details": {"cached_tokens": 768},
}


@asynccontextmanager
async def compaction_service(settings: Settings) -> AsyncIterator[None]:
    """The compaction service's consumer loop as a task, closed on exit."""
    service = await compaction.start(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(
        consume_until(stop, service.consumer, service.jobs, settings.compaction_group)
    )
    try:
        yield
    finally:
        stop.set()
        await task
        await service.close()


def gen_ai(span: ReadableSpan) -> dict[str, Any]:
    assert span.attributes is not None
    return {k: v for k, v in span.attributes.items() if k.startswith("gen_ai.")}


async def test_a_model_call_and_a_summarizer_call_are_genai_spans(
    stack: Stack, pg_dsn: str
) -> None:
    with model_server() as (url, script):
        script.usage = SUMMARIZER_USAGE
        env = services_env(stack, pg_dsn) | {
            "ALC_PREPARE_COMMIT_WAIT_S": "60",
            "ALC_SUMMARIZER": "openai",
            "ALC_SUMMARIZER_BASE_URL": url,
            "ALC_SUMMARIZER_MODEL": "scripted",
            "ALC_COMPACTION_INSTANCE_ID": "genai-spans-1",
        }
        await provision(settings_of(env))
        settings = settings_of(env)
        exporter = InMemorySpanExporter()
        tracing.install(exporter, "tests", batch=False)
        try:
            async with prepare_and_processor(settings) as app, compaction_service(settings):
                issuer = issuer_secret(settings)
                key = await issue(pg_dsn, TEST_SPACE, KeyKind.HOST, label="tests", issuer=issuer)
                async with ContextClient(
                    settings.kafka_bootstrap,
                    "http://prepare.test",
                    topic=settings.topic_records,
                    api_key=key.key,
                    http_transport=httpx.ASGITransport(app=app),
                ) as c:
                    call_id, sid, job = await _call_then_compact(c, pg_dsn)
            spans = exporter.get_finished_spans()
        finally:
            tracing.reset()

    chats = [s for s in spans if s.name.startswith("chat ")]
    (agent,) = [s for s in chats if s.attributes and s.attributes["agentloom.purpose"] == "action"]
    (summarizer,) = [s for s in chats if s.attributes and s.attributes.get("agentloom.job_id")]
    assert agent.name == "chat genai-model"
    assert gen_ai(agent) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.system": "anthropic",
        "gen_ai.request.model": "genai-model",
        "gen_ai.conversation.id": sid,
        "gen_ai.usage.input_tokens": 120 + 2048 + 256,
        "gen_ai.usage.output_tokens": 40,
        "gen_ai.usage.cache_read.input_tokens": 2048,
        "gen_ai.usage.cache_creation.input_tokens": 256,
        "gen_ai.usage.reasoning.output_tokens": 0,
    }
    assert agent.attributes is not None and agent.attributes["agentloom.call_id"] == call_id
    # 120 * 3 + 2048 * 0.3 + 256 * 3.75 + 40 * 15 = 2,534.4 per million = 2,534,400,000 pico
    assert agent.attributes["agentloom.cost_picos"] == 2_534_400_000
    # The report was made inside the runtime's span: the call is in its trace.
    (step,) = [s for s in spans if s.name == "runtime.step"]
    assert agent.parent is not None and step.context is not None
    assert agent.parent.span_id == step.context.span_id

    assert summarizer.name == "chat scripted"
    assert gen_ai(summarizer) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "scripted",
        "gen_ai.conversation.id": sid,
        "gen_ai.usage.input_tokens": 900,
        "gen_ai.usage.output_tokens": 70,
        "gen_ai.usage.cache_read.input_tokens": 768,
        "gen_ai.usage.cache_creation.input_tokens": 0,
        "gen_ai.usage.reasoning.output_tokens": 0,
    }
    assert summarizer.attributes is not None
    assert summarizer.attributes["agentloom.purpose"] == "compaction"
    assert summarizer.attributes["agentloom.job_id"] == job
    # 132 * 3 + 768 * 0.3 + 70 * 15 = 1,676.4 per million = 1,676,400,000 pico
    assert summarizer.attributes["agentloom.cost_picos"] == 1_676_400_000


async def _call_then_compact(c: ContextClient, pg_dsn: str) -> tuple[str, str, str]:
    """One model call reported with Anthropic's usage, inside a runtime span; then two
    questions, so the turn trigger starts a job whose summarizer a model answers. The
    call id, the session id and the committed job's id."""
    session = await new_session(
        c,
        # a model of its own: the usage reported here calibrates no other test's estimates
        model_profile={
            **PROFILE,
            "name": "genai-model",
            "provider_format": "anthropic_messages",
            "prices": PRICES,
        },
        context_policy={"recent_complete_groups": 1, "compaction": {"user_turns": 2}},
    )
    sid = session["session_id"]
    run = await question(c, session, "o", rounds=2)
    with tracing.tracer().start_as_current_span("runtime.step"):
        call = await c.check_model_call(run, await c.prepare(run))
        await c.report_model_result(run, call["call_id"], {"content": "ok"}, ANTHROPIC_USAGE)
    await c.finish_run(run)
    await c.prepare(await question(c, session, "p"))
    pool = await create_pool(pg_dsn, 1, 2)
    try:
        (job,) = await settled(pool, sid)
    finally:
        await pool.close()
    assert job["status"] == "committed"
    return call["call_id"], sid, job["job_id"]
