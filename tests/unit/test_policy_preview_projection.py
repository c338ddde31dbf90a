"""Issue 27 (3): the policy preview shows, per purpose and profile, the projected cache
share and cost per model call of a draft — priced in the profile's currency, or in
input-token equivalents for a profile without prices; issue 39: under the cache rules of
the profile's provider format, beside the ideal share."""

from __future__ import annotations

from dataclasses import replace

import pytest

from domain.compaction.gain import project
from domain.policy.context_policy import effective_policy
from domain.preview.cache_projection import project_cache
from domain.preview.draft import preview, preview_dict
from domain.window.budget import ModelProfile

PRICES = {"input": 3, "output": 15, "cached_input": 0.3, "cache_write": 3.75}
PRICED = ModelProfile("priced", 16_384, 2_048, 512, prices=PRICES)
UNPRICED = ModelProfile("unpriced", 16_384, 2_048, 512)


def action(draft: dict[str, object], profile: ModelProfile) -> dict[str, object]:
    doc = preview_dict(*effective_policy(draft), [profile])
    return next(r for r in doc["budgets"] if r["purpose"] == "action")


@pytest.mark.spec("R17")
def test_the_preview_carries_the_projection_of_the_draft_on_the_profile() -> None:
    policy = effective_policy({})[0]
    row = action({}, PRICED)
    p = project(policy, PRICED, PRICED.prices)
    real = project_cache(policy, PRICED, p.calls_per_compaction)
    # the ideal bound is ``project``'s; the share shown is the provider's (OpenAI Chat:
    # whole 128-token steps of the shared prefix)
    assert row["projected_ideal_cache_share"] == round(p.cache_share, 4)
    assert row["projected_cache_share"] == round(real.share, 4) < round(p.cache_share, 4)
    assert row["projected_cost_per_call"] == round(p.cost_per_call + real.extra_cost_per_call, 6)
    assert (row["cost_unit"], row["calls_per_compaction"]) == ("USD", p.calls_per_compaction)
    # Steady state of the default policy: most of every request is read from the cache.
    assert 0.9 <= row["projected_cache_share"] < 1


@pytest.mark.spec("R17")
def test_the_projection_replays_the_formats_minimum_prefix_and_write_premium() -> None:
    anthropic = replace(PRICED, provider_format="anthropic_messages")
    five = action({}, anthropic)
    # Every request of the cycle is past 1,024 tokens, each marked at its end: the
    # previous request is all read, as in the ideal bound.
    assert five["projected_cache_share"] == five["projected_ideal_cache_share"]
    # Kept for an hour, the stable prefix is written at 2x instead of 1.25x.
    hour = action({}, replace(anthropic, cache_ttl="1h"))
    assert hour["projected_cost_per_call"] > five["projected_cost_per_call"]
    # On a 7,000-token budget the fixed part (700 tokens) is under the minimum: after a
    # commit it is read from no cache. With a 4,096 minimum, neither are the cycle's
    # shorter requests.
    small = replace(anthropic, context_capacity=8_000, output_reserve=1_000, safety_margin=0)
    short = action({}, small)
    high = action({}, replace(small, cache_min_tokens=4_096))
    assert short["projected_cache_share"] < short["projected_ideal_cache_share"]
    assert high["projected_cache_share"] < short["projected_cache_share"]
    assert high["projected_cost_per_call"] > short["projected_cost_per_call"]


def test_without_prices_the_cost_is_in_input_token_equivalents() -> None:
    row = action({}, UNPRICED)
    assert row["cost_unit"] == "input_tokens"
    # Priced at one token per input token, a call costs less than its whole request.
    assert 0 < row["projected_cost_per_call"] < UNPRICED.input_budget()


def test_a_draft_that_compacts_every_question_projects_a_lower_cache_share() -> None:
    default = action({}, PRICED)
    eager = action({"compaction": {"user_turns": 1}}, PRICED)
    assert eager["calls_per_compaction"] < default["calls_per_compaction"]
    assert eager["projected_cache_share"] < default["projected_cache_share"]
    assert eager["projected_cost_per_call"] > default["projected_cost_per_call"]


def test_an_unusable_profile_has_no_projection() -> None:
    tiny = ModelProfile("tiny", 1_000, 900, 200)
    (row, *_) = preview(effective_policy({})[0], [tiny])
    assert row.error is not None and row.projected_cache_share is None
