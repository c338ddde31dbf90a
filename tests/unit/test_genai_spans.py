"""Model calls as GenAI spans (issue 39 item 7, R18): the conventions' attribute names and
exact token counts, for a runtime's call reported to Prepare's gateway and for a
compaction's summarizer call, read back from an in-memory exporter (``streams.genai``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from domain.pricing import ModelPrices
from domain.usage import parse_usage
from schemas.wire import CompactionRequest
from services.compaction.costs import AnsweredCall, Spent, call_spans
from services.prepare.bodies import ModelCallIn, ModelResultIn, PrepareIn
from streams import genai, tracing
from tests.unit.fakes.prepare import PROFILE
from tests.unit.test_prepare_context_gateway import history, world

pytestmark = pytest.mark.spec("R18")

# Anthropic's usage of a call that read 1,000 tokens from the cache and wrote 200: its
# input_tokens (100) excludes both; the conventions' input_tokens includes them.
ANTHROPIC = {
    "input_tokens": 100,
    "cache_read_input_tokens": 1000,
    "cache_creation_input_tokens": 200,
    "output_tokens": 50,
}
NEUTRAL = {  # the same call as Usage.to_dict gives it
    "input_tokens": 1300,
    "fresh_input_tokens": 100,
    "cached_input_tokens": 1000,
    "cache_write_tokens": 200,
    "output_tokens": 50,
    "reasoning_tokens": 0,
}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.install(exporter, "tests", batch=False)
    yield exporter
    tracing.reset()


def only_chat(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    return span


def test_the_attributes_carry_the_conventions_names_and_exact_counts() -> None:
    call = genai.ModelCallSpan(
        "anthropic", "claude-x", "action", "s1", NEUTRAL, 1_234_000, "USD", {"call_id": "mc_1"}
    )
    assert call.name == "chat claude-x"
    assert genai.attributes(call) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.system": "anthropic",
        "gen_ai.request.model": "claude-x",
        "gen_ai.conversation.id": "s1",
        "gen_ai.usage.input_tokens": 1300,
        "gen_ai.usage.output_tokens": 50,
        "gen_ai.usage.cache_read.input_tokens": 1000,
        "gen_ai.usage.cache_creation.input_tokens": 200,
        "gen_ai.usage.reasoning.output_tokens": 0,
        "agentloom.session_id": "s1",
        "agentloom.purpose": "action",
        "agentloom.cost_picos": 1_234_000,
        "agentloom.currency": "USD",
        "agentloom.call_id": "mc_1",
    }


def test_a_call_without_usage_or_prices_has_no_counts_and_no_cost() -> None:
    attrs = genai.attributes(genai.ModelCallSpan("openai", "gpt-x", "compaction", "s1"))
    assert not [k for k in attrs if k.startswith("gen_ai.usage.") or k.startswith("agentloom.c")]


def test_the_provider_name_comes_from_the_request_format() -> None:
    assert genai.provider_of("anthropic_messages") == "anthropic"
    assert genai.provider_of("openai_chat") == genai.provider_of("openai_responses") == "openai"
    assert genai.provider_of("other_format") == "other_format"


def test_a_recorded_call_is_a_finished_client_span(spans: InMemorySpanExporter) -> None:
    with tracing.tracer().start_as_current_span("runtime.step") as step:
        genai.record(genai.ModelCallSpan("openai", "gpt-x", "action", "s1"), 1_000, 5_000)
    span = only_chat(spans)
    assert (span.name, span.kind) == ("chat gpt-x", trace.SpanKind.CLIENT)
    assert (span.start_time, span.end_time) == (1_000, 5_000)
    assert span.parent is not None and span.parent.span_id == step.get_span_context().span_id


def test_nothing_is_recorded_without_a_tracer() -> None:
    exporter = InMemorySpanExporter()
    tracing.install(exporter, "tests", batch=False)
    tracing.reset()  # the process's tracer is gone: its exporter gets nothing more
    genai.record(genai.ModelCallSpan("openai", "gpt-x", "action", "s1"), 1, 2)
    assert not tracing.enabled() and exporter.get_finished_spans() == ()


async def test_a_reported_model_call_is_a_span_once(spans: InMemorySpanExporter) -> None:
    w = await world()
    history(w, 1, 10)
    prepared = await w.svc.preparer.prepare(
        "s1", "r1", PrepareIn(model_profile={**PROFILE, "provider_format": "anthropic_messages"})
    )
    call = await w.svc.gateway.model_call("s1", "r1", ModelCallIn(prepared_id=prepared.prepared_id))
    await w.svc.gateway.model_result("s1", call.call_id, ModelResultIn(usage=ANTHROPIC))
    await w.svc.gateway.model_result("s1", call.call_id, ModelResultIn(usage=ANTHROPIC))
    span = only_chat(spans)  # a repeated report is not a second call
    assert span.name == "chat m" and span.attributes is not None
    assert {k: v for k, v in span.attributes.items() if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.system": "anthropic",
        "gen_ai.request.model": "m",
        "gen_ai.conversation.id": "s1",
        "gen_ai.usage.input_tokens": 1300,
        "gen_ai.usage.output_tokens": 50,
        "gen_ai.usage.cache_read.input_tokens": 1000,
        "gen_ai.usage.cache_creation.input_tokens": 200,
        "gen_ai.usage.reasoning.output_tokens": 0,
    }
    assert span.attributes["agentloom.purpose"] == "action"
    assert span.attributes["agentloom.call_id"] == call.call_id


def test_a_summarizer_call_is_a_priced_span_of_its_job() -> None:
    req = CompactionRequest(
        "job1", "s1", "r1", "i1", 9, None, "rev", 1, ("context_ratio",), 900, 1000, 600, 4, 0
    )
    spent = Spent()
    usage = parse_usage(
        {
            "prompt_tokens": 1200,
            "completion_tokens": 80,
            "prompt_tokens_details": {"cached_tokens": 1000},
        }
    )
    assert usage is not None
    spent.add(usage, 3.0, AnsweredCall("openai", "gpt-mini", "op1", usage, 10, 20))
    prices = ModelPrices.from_dict({"input": 2, "cached_input": 0.5, "output": 8})
    ((span, start, end),) = call_spans(req, spent, prices)
    attrs = genai.attributes(span)
    assert (start, end, span.name) == (10, 20, "chat gpt-mini")
    assert attrs["gen_ai.usage.input_tokens"] == 1200
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 1000
    assert attrs["gen_ai.usage.output_tokens"] == 80
    # 200 * 2 + 1000 * 0.5 + 80 * 8 = 1,540 per million tokens = 1,540,000,000 pico-USD
    assert (attrs["agentloom.cost_picos"], attrs["agentloom.currency"]) == (1_540_000_000, "USD")
    assert (attrs["agentloom.purpose"], attrs["agentloom.job_id"]) == ("compaction", "job1")
