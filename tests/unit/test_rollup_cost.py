"""Cost in the analytics rollups (SPEC R18, R6.4): a model call's stored usage, as
services/prepare/notes.py publishes it, becomes one integer increment per token kind and
one for its exact cost under its currency."""

from __future__ import annotations

import asyncio
import random

import pytest

from domain.pricing import ModelPrices, cost_dict, format_cost
from domain.rollup import Dims, Fact, observability_increments, rollup
from domain.usage import parse_usage
from schemas.answers.prepared import CallBudget, DependencyVersions
from schemas.wire import ObservabilityEvent, decode_observability
from services.prepare.notes import Notes
from storage.calls.model_calls import StoredCall
from tests.unit.fakes.publisher import FakePublisher

PRICES = ModelPrices(input=3, output=15, cached_input=0.3, cache_write=3.75)
DIMS = Dims("space", "agent", "rel", "model", "completion")


def _stored(raw: dict[str, object], prices: ModelPrices | None = PRICES) -> dict[str, object]:
    """The usage record model_gateway stores: neutral tokens, cache share, cost."""
    usage = parse_usage(raw)
    assert usage is not None
    out: dict[str, object] = dict(usage.to_dict())
    return out | (cost_dict(usage, prices) if prices is not None else {})


def _event(usage: dict[str, object], at_ms: int = 5) -> ObservabilityEvent:
    """The model_call event Notes.usage builds from a stored usage record."""
    picos = usage.get("cost_picos")
    currency = usage.get("currency")
    return ObservabilityEvent(
        "model_call",
        "s",
        "r",
        "i",
        at_ms,
        "p",
        purpose="completion",
        estimated_input=990,
        budget_items={
            k: v for k, v in usage.items() if isinstance(v, int) and k.endswith("tokens")
        },
        cost_picos=picos if isinstance(picos, int) else None,
        currency=currency if isinstance(currency, str) else None,
    )


def _incs(ev: ObservabilityEvent) -> dict[tuple[str, str], int]:
    return {(i.metric, i.label): i.value for i in observability_increments(ev)}


ANTHROPIC = {
    "input_tokens": 100,
    "cache_read_input_tokens": 800,
    "cache_creation_input_tokens": 100,
    "output_tokens": 50,
}
OPENAI = {
    "prompt_tokens": 1000,
    "completion_tokens": 50,
    "prompt_tokens_details": {"cached_tokens": 800},
    "completion_tokens_details": {"reasoning_tokens": 20},
}


@pytest.mark.spec("R18", "R6.4")
def test_anthropic_usage_counts_every_token_kind_and_its_exact_cost() -> None:
    incs = _incs(_event(_stored(ANTHROPIC)))
    assert incs == {
        ("model_calls", ""): 1,
        ("estimated_input_tokens_called", ""): 990,
        ("usage_input_tokens", ""): 1000,
        ("usage_fresh_input_tokens", ""): 100,
        ("usage_cached_input_tokens", ""): 800,
        ("usage_cache_write_tokens", ""): 100,
        ("usage_output_tokens", ""): 50,
        ("usage_reasoning_tokens", ""): 0,
        # 100*3 + 800*0.3 + 100*3.75 + 50*15 = 1665 per million tokens = 0.001665 USD
        ("cost_picos", "USD"): 1_665_000_000,
    }


@pytest.mark.spec("R18", "R6.4")
def test_openai_usage_counts_cached_and_reasoning_tokens() -> None:
    incs = _incs(_event(_stored(OPENAI)))
    assert incs[("usage_input_tokens", "")] == 1000
    assert incs[("usage_fresh_input_tokens", "")] == 200
    assert incs[("usage_cached_input_tokens", "")] == 800
    assert incs[("usage_cache_write_tokens", "")] == 0
    assert incs[("usage_output_tokens", "")] == 50
    assert incs[("usage_reasoning_tokens", "")] == 20
    # 200*3 + 800*0.3 + 50*15 = 1590 per million tokens
    assert incs[("cost_picos", "USD")] == 1_590_000_000
    assert all(isinstance(v, int) for v in incs.values())


@pytest.mark.spec("R18")
def test_an_unpriced_call_counts_tokens_but_no_cost() -> None:
    incs = _incs(_event(_stored(ANTHROPIC, prices=None)))
    assert incs[("usage_cached_input_tokens", "")] == 800
    assert not [k for k in incs if k[0] == "cost_picos"]


@pytest.mark.spec("R18")
def test_currencies_are_kept_apart() -> None:
    eur = ModelPrices(input=2, output=10, currency="EUR")
    facts = [
        Fact(5, DIMS, observability_increments(_event(_stored(OPENAI)))),
        Fact(6, DIMS, observability_increments(_event(_stored(OPENAI, eur)))),
        Fact(7, DIMS, observability_increments(_event(_stored(ANTHROPIC)))),
    ]
    costs = {k.label: v for k, v in rollup(facts, ["1m"]).items() if k.metric == "cost_picos"}
    # EUR: 1000*2 + 50*10 = 2500 per million tokens (no cache discount in that profile)
    assert costs == {"USD": 1_590_000_000 + 1_665_000_000, "EUR": 2_500_000_000}
    assert format_cost(costs["USD"]) == "0.003255"


@pytest.mark.spec("R18")
def test_rollups_of_priced_calls_do_not_depend_on_the_replay_order() -> None:
    rng = random.Random(27)
    prices = [PRICES, ModelPrices(input=0.15, output=0.6, cached_input=0.075)]
    facts = []
    for _ in range(300):
        raw = {
            "input_tokens": rng.randint(0, 5000),
            "cache_read_input_tokens": rng.randint(0, 50_000),
            "cache_creation_input_tokens": rng.randint(0, 2000),
            "output_tokens": rng.randint(0, 4000),
        }
        ev = _event(_stored(raw, rng.choice(prices)), at_ms=rng.randint(0, 3 * 3_600_000))
        facts.append(Fact(ev.occurred_at_ms, DIMS, observability_increments(ev)))
    forward = rollup(facts)
    for _ in range(3):
        rng.shuffle(facts)
        assert rollup(facts) == forward
    total = sum(v for k, v in forward.items() if k.window == "1h" and k.metric == "cost_picos")
    exact = sum(i.value for f in facts for i in f.increments if i.metric == "cost_picos")
    assert total == exact > 0


@pytest.mark.spec("R18")
def test_a_compaction_attempt_counts_its_summarizer_calls_and_their_cost() -> None:
    usage = parse_usage({"fresh_input_tokens": 4000, "cached_input_tokens": 6000,
                         "output_tokens": 300})  # fmt: skip
    assert usage is not None
    ev = ObservabilityEvent(
        "model_call", "s", "r", "i", 5, "p", purpose="compaction", job_id="j",
        budget_items=usage.to_dict(), model_calls=3, cost_picos=cost_dict(usage, PRICES)[
            "cost_picos"], currency="USD",
    )  # fmt: skip
    incs = _incs(ev)
    assert incs[("model_calls", "")] == 3
    assert ("estimated_input_tokens_called", "") not in incs
    assert incs[("usage_cached_input_tokens", "")] == 6000
    # 4000*3 + 6000*0.3 + 300*15 = 18300 per million tokens
    assert incs[("cost_picos", "USD")] == 18_300 * 10**6


def _call() -> StoredCall:
    # only the fields the usage note reads
    budget = CallBudget.model_construct(
        input_budget=14500, final_estimated_input=990, counting_method="x"
    )
    deps = DependencyVersions.model_construct(policy_revision="p")
    return StoredCall("c", "pc", "s", "r", "i", "completion", "m", "completed", "sha",
                      budget, [], deps, None)  # fmt: skip


@pytest.mark.spec("R18", "R6.4")
async def test_notes_publish_the_stored_usage_with_its_exact_cost() -> None:
    publisher = FakePublisher()
    notes = Notes(publisher, "obs")
    notes.usage(_call(), _stored(ANTHROPIC) | {"cache_share": 0.8})
    notes.usage(_call(), _stored(ANTHROPIC, prices=None) | {"cache_share": 0.8})
    await asyncio.sleep(0)  # the advisory sends run as tasks
    priced, unpriced = (decode_observability(m.value) for m in publisher.on("obs"))
    assert (priced.cost_picos, priced.currency) == (1_665_000_000, "USD")
    assert priced.budget_items["cached_input_tokens"] == 800
    assert "cache_share" not in priced.budget_items and "cost" not in priced.budget_items
    assert (unpriced.cost_picos, unpriced.currency) == (None, None)
    assert _incs(priced) == _incs(_event(_stored(ANTHROPIC)))
