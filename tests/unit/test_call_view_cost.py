"""A model call's tokens by kind, cache share and cost in the one view the web inspector and
``agentloom session inspect`` show (domain/context/call_view.py), and a session's total cost per
currency, summed exactly in pico-units."""

from __future__ import annotations

from typing import Any

import pytest

from domain.context.call_view import (
    NO_USAGE,
    NOT_PRICED,
    CallFacts,
    call_cost,
    call_view,
    session_cost,
)
from schemas.answers.diagnostics import NO_RESULT, CallCost

# The normalized usage as the gateway stores it for an Anthropic-shaped report of
# 100 fresh, 800 cached and 100 cache-write input tokens and 50 output tokens, priced
# 3 / 0.3 / 3.75 / 15 per million: 100*3 + 800*0.3 + 100*3.75 + 50*15 = 1665 micro-USD.
PRICED = {
    "input_tokens": 1000,
    "fresh_input_tokens": 100,
    "cached_input_tokens": 800,
    "cache_write_tokens": 100,
    "output_tokens": 50,
    "reasoning_tokens": 0,
    "cache_share": 0.8,
    "cost": "0.001665",
    "cost_picos": 1_665_000_000,
    "currency": "USD",
}


def _facts(**kw: Any) -> CallFacts:
    base: dict[str, Any] = {
        "call_id": "mc_1",
        "run_id": "run",
        "instance_id": "main",
        "purpose": "action",
        "model": "m",
        "status": "completed",
        "budget": {"input_budget": 1000, "items": {}},
        "manifest": (),
        "dependency_versions": {},
        "hook_versions": (),
        "records": (),
        "chain": (),
        "inline_max_tokens": 4000,
    }
    return CallFacts(**(base | kw))


@pytest.mark.spec("R18")
def test_a_priced_result_shows_its_tokens_by_kind_cache_share_and_cost() -> None:
    k = call_view(_facts(usage=PRICED, priced=True)).cost
    assert (
        k.fresh_input_tokens,
        k.cached_input_tokens,
        k.cache_write_tokens,
        k.output_tokens,
        k.reasoning_tokens,
    ) == (100, 800, 100, 50, 0)
    assert (k.input_tokens, k.cache_share_percent, k.cache_share_label) == (1000, 80.0, "80.0%")
    assert (k.cost, k.cost_picos, k.currency) == ("0.001665", 1_665_000_000, "USD")
    assert k.cost_label == "0.001665 USD" and k.reported and k.priced


@pytest.mark.spec("R18")
def test_the_cost_is_read_from_the_exact_picos_not_the_stored_string() -> None:
    k = call_cost("completed", PRICED | {"cost": "wrong", "cost_picos": 7}, True)
    assert (k.cost, k.cost_label) == ("0.000000000007", "0.000000000007 USD")


@pytest.mark.spec("R18")
def test_a_result_of_an_unpriced_profile_has_tokens_and_no_cost() -> None:
    unpriced = {k: v for k, v in PRICED.items() if k not in ("cost", "cost_picos", "currency")}
    k = call_view(_facts(usage=unpriced)).cost
    assert (k.cost, k.cost_picos, k.currency, k.cost_label) == (None, None, None, NOT_PRICED)
    assert k.cost_label == "not priced" and not k.priced
    assert (k.cached_input_tokens, k.cache_share_label) == (800, "80.0%")


@pytest.mark.spec("R18")
def test_a_call_without_a_result_says_so() -> None:
    for usage in (None, {}):
        k = call_view(_facts(status="ready", usage=usage, priced=True)).cost
        assert k == CallCost(reported=False, priced=True, cost_label=NO_RESULT)
        assert (k.cost_label, k.cache_share_label) == ("no result yet", "—")
    done = call_cost("completed", {}, True)
    assert (done.reported, done.cost_label) == (True, NO_USAGE)


@pytest.mark.spec("R18")
def test_cache_share_without_input_is_a_dash_and_old_usage_counts_as_fresh() -> None:
    only_output = call_cost("completed", {"output_tokens": 9}, False)
    assert (only_output.cache_share_percent, only_output.cache_share_label) == (None, "—")
    # A usage stored with all input in input_tokens: what is not cached is fresh.
    old = call_cost("completed", {"input_tokens": 30, "cached_input_tokens": 10}, False)
    assert (old.fresh_input_tokens, old.cached_input_tokens, old.cache_share_label) == (
        20,
        10,
        "33.3%",
    )
    odd = call_cost("completed", {"input_tokens": -5, "output_tokens": True}, False)
    assert (odd.input_tokens, odd.output_tokens) == (0, 0)


@pytest.mark.spec("R18")
def test_the_session_total_is_the_exact_sum_per_currency() -> None:
    # 0.1 + 0.2 as floats is 0.30000000000000004; in pico-units it is exact.
    tenth = call_cost("completed", PRICED | {"cost_picos": 100_000_000_000}, True)
    fifth = call_cost("completed", PRICED | {"cost_picos": 200_000_000_000}, True)
    euros = call_cost("completed", PRICED | {"currency": "EUR"}, True)
    unpriced = call_cost("completed", {"input_tokens": 10}, False)
    pending = call_cost("ready", None, True)
    totals = session_cost([tenth, euros, fifth, unpriced, pending])
    assert [(t.currency, t.cost_picos, t.cost, t.calls) for t in totals] == [
        ("EUR", 1_665_000_000, "0.001665", 1),
        ("USD", 300_000_000_000, "0.3", 2),
    ]
    assert session_cost([unpriced, pending]) == ()


@pytest.mark.spec("R18")
def test_the_view_as_a_dict_carries_the_cost() -> None:
    d = call_view(_facts(usage=PRICED, priced=True)).to_dict()
    assert d["cost"]["cost_label"] == "0.001665 USD"
    assert d["cost"]["cache_share_label"] == "80.0%"
