"""Prices and provider usage (issue 27 item 2, R18 summary call cost)."""

from __future__ import annotations

import pytest

from domain.pricing import ModelPrices, Usage, cost
from schemas.errors import InvalidPolicy

PRICES = ModelPrices(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75)


@pytest.mark.spec("R18")
def test_openai_usage_counts_cached_tokens_inside_the_prompt() -> None:
    u = Usage.openai(prompt_tokens=2_000, completion_tokens=100, cached_tokens=1_536, reasoning=40)
    assert (u.fresh_input_tokens, u.cached_input_tokens, u.input_tokens) == (464, 1_536, 2_000)
    assert u.cache_share == pytest.approx(0.768)
    assert cost(u, PRICES) == pytest.approx((464 * 3 + 1_536 * 0.3 + 100 * 15) / 1e6)


@pytest.mark.spec("R18")
def test_anthropic_usage_counts_cache_reads_and_writes_beside_the_input() -> None:
    u = Usage.anthropic(
        input_tokens=50,
        output_tokens=10,
        cache_read_input_tokens=900,
        cache_creation_input_tokens=100,
    )
    assert u.input_tokens == 1_050
    assert cost(u, PRICES) == pytest.approx((50 * 3 + 900 * 0.3 + 100 * 3.75 + 10 * 15) / 1e6)


def test_missing_cache_prices_cost_as_fresh_input() -> None:
    p = ModelPrices.from_dict({"input": 2, "output": 8})
    u = Usage(fresh_input_tokens=10, cached_input_tokens=10, cache_write_tokens=10)
    assert cost(u, p) == pytest.approx(30 * 2 / 1e6)
    assert Usage().cache_share is None


@pytest.mark.parametrize(
    "raw",
    [
        {"output": 1},
        {"input": -1, "output": 1},
        {"input": True, "output": 1},
        {"input": 1, "output": 1, "x": 2},
    ],
)
def test_bad_prices_are_refused_with_their_path(raw: dict[str, object]) -> None:
    with pytest.raises(InvalidPolicy) as exc:
        ModelPrices.from_dict(raw)
    assert exc.value.details["json_path"].startswith("model_profile.prices.")


def test_usages_add_up_by_kind() -> None:
    a = Usage(fresh_input_tokens=10, cached_input_tokens=90, output_tokens=5)
    b = Usage(fresh_input_tokens=1, cache_write_tokens=7, output_tokens=2, reasoning_tokens=3)
    assert a + b == Usage(11, 90, 7, 7, 3)
    assert (a + b).input_tokens == a.input_tokens + b.input_tokens
