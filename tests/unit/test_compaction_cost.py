"""The price of compaction (R18): the OpenAI-compatible summarizer keeps the provider's
cached and reasoning tokens, a model that reports none is counted, and a job attempt that
got answers from a model publishes one ``model_call`` event under purpose ``compaction``
with its tokens and, on a priced profile, its exact cost. The built-in extractive
summarizer runs no model: no usage, no cost, no ``model_call`` (issue 39 item 4)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from domain.compaction.drafts import SourceItem, SummaryRequest, SummaryResult
from domain.policy.context_policy import ContextPolicy, effective_policy
from domain.pricing import ModelPrices
from domain.usage import Usage
from domain.window.budget import ModelProfile
from schemas.settings import Settings
from schemas.wire import decode_observability
from services.compaction import bootstrap
from services.compaction.costs import CostNotes, Spent, compaction_prices, model_call_event
from services.compaction.extractive import ExtractiveSummarizer
from services.compaction.openai_compat import (
    RESPONSE_FORMATS,
    OpenAICompatibleSummarizer,
    completion_usage,
)
from services.compaction.scripted import ScriptedSummarizer
from services.compaction.wording import SYSTEM_PROMPT
from streams.wiring import gain_settings
from tests.unit.fakes.compaction import FakeCompactionJobs, history
from tests.unit.fakes.publisher import FakePublisher
from tests.unit.test_compaction_worker import COUNTER, SETTINGS, published, request

PRICES = {"input": 2.5, "cached_input": 0.25, "output": 10, "currency": "USD"}
OWN = {"name": "own", "context_capacity": 128_000, "output_reserve": 4000, "safety_margin": 500}
SMALL = ModelProfile("small", 32_000, 1000, 100, prices=ModelPrices(0.1, 0.4, 0.01))


def _policy(overrides: dict[str, Any] | None = None) -> ContextPolicy:
    return effective_policy(overrides or {})[0]


def _req() -> SummaryRequest:
    item = SourceItem("rec_1", 1, "user_message", "user", "fix the build")
    return SummaryRequest((item,), None, 200, "cmp_1:model:0")


def _draft() -> str:
    fact = {"statement": "the build was asked to be fixed", "source_ids": ["rec_1"]}
    sections = ("decisions", "failures", "unresolved_questions")
    return json.dumps(
        {"verified_facts": [fact], **{k: [] for k in sections}, "work_artifact_refs": []}
    )


def _adapter(usage: Any) -> OpenAICompatibleSummarizer:
    def reply(_: httpx.Request) -> httpx.Response:
        body = {"choices": [{"message": {"content": _draft()}}], "usage": usage}
        return httpx.Response(200, json=body)

    client = httpx.AsyncClient(transport=httpx.MockTransport(reply))
    return OpenAICompatibleSummarizer("http://model/v1", "m", client=client)


@pytest.mark.spec("R18")
async def test_the_openai_adapter_keeps_cached_and_reasoning_tokens() -> None:
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 1000},
        "completion_tokens_details": {"reasoning_tokens": 120},
    }
    result = await _adapter(usage).summarize(_req())
    assert result.usage == Usage(200, 1000, 0, 300, 120)
    assert (result.input_tokens, result.output_tokens) == (1200, 300)


@pytest.mark.spec("R18")
async def test_no_usage_or_usage_that_cannot_be_attributed_is_none_never_zero() -> None:
    # None: the worker counts the call (``BoundedSummarizer.counted``), never 0 tokens.
    assert (await _adapter(None).summarize(_req())).usage is None
    garbled = {"prompt_tokens": 50, "completion_tokens": 7, "prompt_tokens_details": "x"}
    assert completion_usage({"usage": garbled}) is None
    assert completion_usage({"usage": {"prompt_tokens": -1}}) is None
    assert completion_usage({"usage": {"total_tokens": 57}}) is None


@pytest.mark.spec("R18")
def test_the_event_carries_purpose_tokens_and_the_exact_cost_of_a_priced_profile() -> None:
    spent = Spent()
    spent.add(Usage(200, 1000, 0, 300, 120), 12.0)
    spent.add(Usage(fresh_input_tokens=100, output_tokens=50), 3.0)
    prices = compaction_prices(_policy(), {**OWN, "prices": PRICES}, {})
    ev = model_call_event(request(), spent, prices, 1)
    assert (ev.kind, ev.purpose, ev.job_id) == ("model_call", "compaction", "cmp_1")
    assert ev.model_calls == 2
    assert ev.budget_items == {
        "input_tokens": 1300,
        "fresh_input_tokens": 300,
        "cached_input_tokens": 1000,
        "cache_write_tokens": 0,
        "output_tokens": 350,
        "reasoning_tokens": 120,
    }
    # 300 * 2.5 + 1000 * 0.25 + 350 * 10 = 4500 per million = 0.0045 USD
    assert (ev.cost_picos, ev.currency) == (4_500_000_000, "USD")


@pytest.mark.spec("R18")
def test_an_unpriced_profile_has_tokens_but_no_cost() -> None:
    spent = Spent()
    spent.add(Usage(fresh_input_tokens=10, output_tokens=5))
    ev = model_call_event(request(), spent, compaction_prices(_policy(), OWN, {}), 1)
    assert ev.budget_items["input_tokens"] == 10 and ev.budget_items["output_tokens"] == 5
    assert (ev.cost_picos, ev.currency) == (None, None)


@pytest.mark.spec("R17", "R18")
def test_a_compaction_model_profile_ref_prices_compaction_on_that_profile() -> None:
    policy = _policy({"purpose_profiles": {"compaction": {"model_profile_ref": "small"}}})
    priced = {**OWN, "prices": PRICES}
    assert compaction_prices(policy, priced, {"small": SMALL}) == SMALL.prices
    assert compaction_prices(_policy(), priced, {"small": SMALL}) == ModelPrices.from_dict(PRICES)


class _Fixed:
    def __init__(self, prices: ModelPrices | None) -> None:
        self.value = prices

    async def prices(self, session_id: str) -> ModelPrices | None:
        return self.value


class _SilentModel:
    """A model summarizer that reports no usage (the extractive draft stands in for its
    answer): each call ran a model, so the worker counts it."""

    name = "silent_model"

    def __init__(self) -> None:
        self.calls = 0

    async def summarize(self, req: SummaryRequest) -> SummaryResult:
        self.calls += 1
        result = await ExtractiveSummarizer().summarize(req)
        return dataclasses.replace(result, adapter=self.name, model_call=True)


@pytest.mark.spec("R18", "R15.3")
async def test_a_job_publishes_one_counted_event_and_a_redelivery_none() -> None:
    publisher = FakePublisher()
    jobs = FakeCompactionJobs(history(3))
    costs = CostNotes(publisher, "obs", _Fixed(ModelPrices(1, 2)))
    gateway = _SilentModel()
    w = bootstrap.build_worker(SETTINGS, jobs, publisher, gateway, COUNTER, costs=costs)
    outcome = await w.handle(request())
    assert outcome.status == "succeeded"
    [sent] = publisher.on("obs")
    assert sent.how == "advisory" and sent.key == b"ses_1"
    ev = decode_observability(sent.value)
    assert (ev.kind, ev.purpose, ev.job_id) == ("model_call", "compaction", "cmp_1")
    assert ev.model_calls == gateway.calls == outcome.model_calls
    inp, out = ev.budget_items["input_tokens"], ev.budget_items["output_tokens"]
    assert inp > 0 and out > 0 and ev.budget_items["cached_input_tokens"] == 0
    assert ev.cost_picos == inp * 1_000_000 + out * 2_000_000  # 1 and 2 per million
    await w.handle(request())  # redelivered: the saved outcome, no model call
    assert len(publisher.on("obs")) == 1 and len(published(publisher)) == 2


@pytest.mark.spec("R18")
async def test_a_job_whose_calls_all_failed_publishes_no_model_call() -> None:
    publisher = FakePublisher()
    costs = CostNotes(publisher, "obs", _Fixed(None))
    gateway = ScriptedSummarizer(["fail"])
    jobs = FakeCompactionJobs(history(3))
    w = bootstrap.build_worker(SETTINGS, jobs, publisher, gateway, COUNTER, costs=costs)
    assert (await w.handle(request())).status == "failed"
    assert gateway.calls == 1 and publisher.on("obs") == []


@pytest.mark.spec("R18")
@pytest.mark.parametrize("gateway", [ExtractiveSummarizer(), ScriptedSummarizer(["ok"])])
async def test_a_job_that_ran_no_model_bills_nothing_and_publishes_no_model_call(
    gateway: ExtractiveSummarizer | ScriptedSummarizer,
) -> None:
    publisher = FakePublisher()
    costs = CostNotes(publisher, "obs", _Fixed(ModelPrices(15, 75)))
    jobs = FakeCompactionJobs(history(3))
    w = bootstrap.build_worker(SETTINGS, jobs, publisher, gateway, COUNTER, costs=costs)
    outcome = await w.handle(request())
    assert outcome.status == "succeeded" and outcome.model_calls >= 1
    assert publisher.on("obs") == []  # no usage, no cost: nothing priced at Opus rates
    # What it read and wrote stays as our own counts, the outcome's diagnostics.
    assert outcome.covered_tokens > 0 and outcome.summary_tokens > 0


@pytest.mark.spec("R9.4", "R18")
def test_the_processor_bills_a_model_summarizer_its_instruction_and_catalog_prices() -> None:
    catalog = str(Path(__file__).resolve().parents[1] / "support" / "model_profiles.json")
    billed = gain_settings(Settings(summarizer="openai", model_profiles_file=catalog))
    # What the built-in prompt and its answer schema take, every job (at least).
    instruction = COUNTER.count(SYSTEM_PROMPT) + COUNTER.count(json.dumps(RESPONSE_FORMATS[0]))
    assert billed.model_summarizer and billed.summarizer_overhead >= instruction
    assert billed.profiles["priced-compactor"].prices == ModelPrices("0.1", "0.4", "0.01")
    policy = _policy(
        {"purpose_profiles": {"compaction": {"model_profile_ref": "priced-compactor"}}}
    )
    action, summarizer = billed.prices(policy, {**OWN, "prices": PRICES})
    assert (action, summarizer) == (
        ModelPrices.from_dict(PRICES),
        ModelPrices("0.1", "0.4", "0.01"),
    )
    free = gain_settings(Settings(model_profiles_file=catalog))
    assert not free.model_summarizer and free.summarizer_overhead == 0
