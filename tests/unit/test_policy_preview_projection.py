"""Issue 27 (3): the policy preview shows, per purpose and profile, the projected cache
share and cost per model call of a draft — priced in the profile's currency, or in
input-token equivalents for a profile without prices."""

from __future__ import annotations

import pytest

from domain.compaction.gain import project
from domain.context.budget import ModelProfile
from domain.policy.context_policy import effective_policy
from domain.policy.draft import preview, preview_dict

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
    assert row["projected_cache_share"] == round(p.cache_share, 4)
    assert row["projected_cost_per_call"] == round(p.cost_per_call, 6)
    assert (row["cost_unit"], row["calls_per_compaction"]) == ("USD", p.calls_per_compaction)
    # Steady state of the default policy: most of every request is read from the cache.
    assert 0.9 <= row["projected_cache_share"] < 1


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
