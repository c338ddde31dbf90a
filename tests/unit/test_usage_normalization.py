"""Provider usage shapes normalized once (issue 27, issue 39 item 4): tokens by kind and
the exact cost; what cannot be attributed to a kind is refused, never stored as 0."""

from __future__ import annotations

import pytest

from domain.pricing import ModelPrices, cost_dict
from domain.usage import Usage, parse_usage
from domain.window.budget import ModelProfile
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


@pytest.mark.spec("R18")
def test_gemini_usage_metadata_prompt_includes_the_cached_content() -> None:
    u = parse_usage(
        {
            "promptTokenCount": 1200,
            "cachedContentTokenCount": 1000,
            "candidatesTokenCount": 40,
            "thoughtsTokenCount": 60,
            "toolUsePromptTokenCount": 5,
            "totalTokenCount": 1305,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 1200}],
        }
    )
    # fresh: 200 of the prompt + 5 of tool use; thinking is output beside the candidates'
    assert u == Usage(205, 1000, 0, 100, 60)
    with pytest.raises(InvalidRequest) as exc:
        parse_usage({"promptTokenCount": 10, "cachedContentTokenCount": 11})
    assert exc.value.details["field"] == "usage.cachedContentTokenCount"


@pytest.mark.spec("R18")
def test_bedrock_converse_input_excludes_cache_reads_and_writes() -> None:
    u = parse_usage(
        {
            "inputTokens": 100,
            "outputTokens": 20,
            "totalTokens": 1320,
            "cacheReadInputTokens": 900,
            "cacheWriteInputTokens": 300,
            "cacheDetails": [{"ttl": "1h", "inputTokens": 200}, {"ttl": "5m", "inputTokens": 100}],
        }
    )
    assert u == Usage(100, 900, 300, 20, 0, cache_write_1h_tokens=200)
    assert u.input_tokens == 1300
    # 100*3 + 900*0.3 + 100*3.75 + 200*6 (1h: twice the input) + 20*15 per million
    assert cost_dict(u, PRICES)["cost_picos"] == (300 + 270 + 375 + 1200 + 300) * 10**6


@pytest.mark.spec("R18")
def test_anthropic_one_hour_writes_are_split_out_of_the_cache_creation() -> None:
    raw = {
        "input_tokens": 10,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 500,
        "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 400},
        "output_tokens": 5,
        "service_tier": "standard",
    }
    u = parse_usage(raw)
    assert u == Usage(10, 0, 500, 5, 0, cache_write_1h_tokens=400)
    assert u is not None and u.to_dict()["cache_write_1h_tokens"] == 400
    # 10*3 + 100*3.75 + 400*6 + 5*15 = 2880 per million, not 500 writes at 3.75
    assert cost_dict(u, PRICES)["cost"] == "0.00288"
    assert parse_usage(u.to_dict()) == u  # the stored shape reads back the same
    bad = raw | {"cache_creation": {"ephemeral_1h_input_tokens": 400}}
    with pytest.raises(InvalidRequest) as exc:
        parse_usage(bad)
    assert exc.value.details["field"] == "usage.cache_creation"


@pytest.mark.spec("R18")
@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"total_tokens": 1500}, "usage.total_tokens"),  # a total alone: no kinds
        ({"totalTokenCount": 1500}, "usage.totalTokenCount"),
        ({"tokens": 1500}, "usage.tokens"),  # a key no shape knows
        ({"prompt_tokens": 10, "completion_tokens": 2, "audio_tokens": 3}, "usage.audio_tokens"),
        ({"input_tokens": 10, "output_tokens": 2, "cost": 0.1}, "usage.cost"),
        ({"promptTokenCount": 10, "inputTokens": 5}, "usage.inputTokens"),  # two shapes
        ({"inputTokens": 10, "cacheDetails": [{"ttl": "1d", "inputTokens": 1}]},
         "usage.cacheDetails.0"),
    ],
)  # fmt: skip
def test_what_cannot_be_attributed_is_refused_never_stored_as_zero(
    raw: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidRequest) as exc:
        parse_usage(raw)
    assert exc.value.details["reason"] == "invalid_usage"
    assert exc.value.details["field"] == field


def test_informational_keys_of_a_shape_are_accepted() -> None:
    chat = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    assert parse_usage(chat) == Usage(10, 0, 0, 2, 0)
    plain = {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}
    assert parse_usage(plain) == Usage(10, 0, 0, 2, 0)
    assert parse_usage({"input_tokens": 7}) == Usage(7)
    assert parse_usage({}) is None
