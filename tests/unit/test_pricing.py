"""Prices and costs (issue 27 item 2, issue 39 item 4; R18 summary call cost): prices are
the exact decimals they are written as, integer pico-units per token, never rounded."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.pricing import ModelPrices, TokenRates, cost_dict, cost_picos
from domain.usage import Usage
from schemas.errors import InvalidPolicy

PRICES = ModelPrices(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75)


@pytest.mark.spec("R18")
def test_openai_usage_counts_cached_tokens_inside_the_prompt() -> None:
    u = Usage.openai(prompt_tokens=2_000, completion_tokens=100, cached_tokens=1_536, reasoning=40)
    assert (u.fresh_input_tokens, u.cached_input_tokens, u.input_tokens) == (464, 1_536, 2_000)
    assert u.cache_share == pytest.approx(0.768)
    # 464 * 3 + 1,536 * 0.3 + 100 * 15 = 3,352.8 per million tokens
    assert cost_picos(u, PRICES) == 3_352_800_000


@pytest.mark.spec("R18")
def test_anthropic_usage_counts_cache_reads_and_writes_beside_the_input() -> None:
    u = Usage.anthropic(
        input_tokens=50,
        output_tokens=10,
        cache_read_input_tokens=900,
        cache_creation_input_tokens=100,
    )
    assert u.input_tokens == 1_050
    # 50 * 3 + 900 * 0.3 + 100 * 3.75 + 10 * 15 = 945 per million tokens
    assert cost_dict(u, PRICES)["cost"] == "0.000945"


def test_missing_cache_prices_cost_as_fresh_input() -> None:
    p = ModelPrices.from_dict({"input": 2, "output": 8})
    u = Usage(fresh_input_tokens=10, cached_input_tokens=10, cache_write_tokens=10)
    assert cost_picos(u, p) == 30 * 2_000_000
    assert Usage().cache_share is None


@pytest.mark.spec("R18")
@pytest.mark.parametrize("written", ["0.0004", 0.0004, Decimal("0.0004"), "4e-4"])
def test_a_price_is_the_exact_decimal_it_is_written_as(written: object) -> None:
    # 0.0004 per million tokens is 400 pico-units a token: rounded to three decimals it
    # was 0, and a million cached tokens were free.
    p = ModelPrices.from_dict({"input": "3", "output": 15, "cached_input": written})
    assert p.cached_input == Decimal("0.0004")
    assert p.rates() == TokenRates(
        input=3_000_000, cached=400, write=3_000_000, write_1h=6_000_000, output=15_000_000
    )
    million = Usage(cached_input_tokens=1_000_000)
    assert cost_dict(million, p) == {"cost": "0.0004", "cost_picos": 400_000_000, "currency": "USD"}


def test_six_decimals_are_exact_and_a_seventh_is_refused() -> None:
    p = ModelPrices.from_dict({"input": "0.000001", "output": "999999.999999"})
    assert p.rates().input == 1 and p.rates().output == 999_999_999_999
    assert cost_picos(Usage(fresh_input_tokens=7, output_tokens=3), p) == 7 + 3 * 999_999_999_999
    for bad in ("0.0000001", 0.0000001, "1e6", 1e6, "nan", "inf", "-0.1", "three", [], True):
        with pytest.raises(InvalidPolicy) as exc:
            ModelPrices.from_dict({"input": 1, "output": 1, "cache_write": bad})
        assert exc.value.details["json_path"] == "model_profile.prices.cache_write"


@given(
    st.decimals(min_value=0, max_value=Decimal("999999.999999"), places=6, allow_nan=False),
)
def test_a_json_number_reads_back_as_the_decimal_written(price: Decimal) -> None:
    # A price travels as a JSON number (a float): it reads back as the same decimal,
    # and so does the profile's own to_dict (what a prepare records in its budget).
    p = ModelPrices.from_dict({"input": float(price), "output": str(price)})
    assert p.input == p.output == price
    assert ModelPrices.from_dict(p.to_dict()) == p
    assert p.rates().input == int(price * 1_000_000)


@pytest.mark.spec("R18")
def test_one_hour_cache_writes_cost_their_own_rate() -> None:
    u = Usage.anthropic(10, 0, 0, cache_creation_input_tokens=100, cache_write_1h_tokens=40)
    # 60 five-minute writes at 3.75, 40 one-hour writes at twice the input (6), 10 fresh.
    assert cost_picos(u, PRICES) == (10 * 3 + 60 * 3.75 + 40 * 6) * 10**6
    own = ModelPrices.from_dict({**PRICES.to_dict(), "cache_write_1h": 5.5})
    assert cost_picos(u, own) == (10 * 3 + 60 * 3.75 + 40 * 5.5) * 10**6


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
    b = Usage(1, 0, 7, 2, 3, cache_write_1h_tokens=7)
    assert a + b == Usage(11, 90, 7, 7, 3, 7)
    assert (a + b).input_tokens == a.input_tokens + b.input_tokens
    assert "cache_write_1h_tokens" not in a.to_dict()
    assert (a + b).to_dict()["cache_write_1h_tokens"] == 7
