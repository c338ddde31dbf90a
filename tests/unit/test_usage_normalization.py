"""Provider usage shapes normalized once (issue 27): tokens by kind and the exact cost."""

from __future__ import annotations

import pytest

from domain.context.budget import ModelProfile
from domain.pricing import ModelPrices, Usage, cost_dict, parse_usage
from schemas.errors import InvalidPolicy, InvalidRequest

PRICES = ModelPrices(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75)


def test_openai_chat_prompt_tokens_include_cached() -> None:
    u = parse_usage(
        {
            "prompt_tokens": 1000,
            "completion_tokens": 50,
            "prompt_tokens_details": {"cached_tokens": 800},
            "completion_tokens_details": {"reasoning_tokens": 20},
        }
    )
    assert u == Usage(200, 800, 0, 50, 20)
    assert u.input_tokens == 1000


def test_openai_responses_shape() -> None:
    u = parse_usage(
        {
            "input_tokens": 1000,
            "output_tokens": 10,
            "input_tokens_details": {"cached_tokens": 600},
            "output_tokens_details": {"reasoning_tokens": 4},
        }
    )
    assert u == Usage(400, 600, 0, 10, 4)


def test_anthropic_input_excludes_cache_reads_and_writes() -> None:
    u = parse_usage(
        {
            "input_tokens": 100,
            "cache_read_input_tokens": 800,
            "cache_creation_input_tokens": 100,
            "output_tokens": 50,
        }
    )
    assert u == Usage(100, 800, 100, 50, 0)
    assert u.input_tokens == 1000  # what calibration compares with the estimate
    assert u.cache_share == 0.8


def test_cost_is_exact() -> None:
    u = Usage(100, 800, 100, 50, 0)
    # 100*3 + 800*0.3 + 100*3.75 + 50*15 = 1665 per million tokens
    assert cost_dict(u, PRICES)["cost"] == "0.001665"


@pytest.mark.parametrize(
    "raw",
    [
        {"input_tokens": -1},
        {"prompt_tokens": 1.5},
        {"prompt_tokens": True},
        {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 11}},
        {"prompt_tokens": 10, "cache_read_input_tokens": 1},
    ],
)
def test_nonsense_usage_is_refused(raw: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest) as exc:
        parse_usage(raw)
    assert exc.value.details["reason"] == "invalid_usage"


def test_profile_carries_prices_and_refuses_bad_ones() -> None:
    base = {"name": "m", "context_capacity": 100_000, "output_reserve": 1000, "safety_margin": 0}
    prof = ModelProfile.from_dict(base | {"prices": {"input": 3, "output": 15}})
    assert prof.prices == ModelPrices(input=3.0, output=15.0)
    with pytest.raises(InvalidPolicy) as exc:
        ModelProfile.from_dict(base | {"prices": {"input": -1, "output": 15}})
    assert exc.value.details["json_path"] == "model_profile.prices.input"
