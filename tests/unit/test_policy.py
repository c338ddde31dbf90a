"""R7.7: publish-time validation of the compaction policy."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.policy.context_policy import (
    PLATFORM_MAX_COMPACTION_CALLS,
    CompactionPolicy,
    validate_compaction,
    validate_policy,
)
from schemas.errors import InvalidPolicy


@pytest.mark.spec("R7.1", "R7.5", "R7.6")
def test_defaults_are_the_seed_defaults() -> None:
    p = validate_compaction({})
    assert p == CompactionPolicy(0.80, None, None, 0.60, 4, 0.05)


@pytest.mark.spec("R7.7")
@pytest.mark.parametrize(
    ("raw", "rule"),
    [
        ({"context_ratio": None}, "no_trigger_enabled"),
        ({"context_ratio": 0}, "ratio_range"),
        ({"context_ratio": 1}, "ratio_range"),
        ({"context_ratio": 1.2}, "ratio_range"),
        ({"context_ratio": True}, "ratio_range"),
        ({"user_turns": 0}, "positive_integer"),
        ({"user_turns": -3}, "positive_integer"),
        ({"model_steps": 2.5}, "positive_integer"),
        ({"target_context_ratio": 0.8}, "target_not_below_trigger"),
        ({"target_context_ratio": 0.9}, "target_not_below_trigger"),
        ({"target_context_ratio": None}, "required"),
        ({"max_compaction_calls": 0}, "positive_integer"),
        ({"max_compaction_calls": PLATFORM_MAX_COMPACTION_CALLS + 1}, "platform_cap"),
        ({"retry_growth_ratio": 0}, "ratio_range"),
        ({"retry_growth_ratio": 1.0}, "ratio_range"),
        ({"contex_ratio": 0.7}, "unknown_field"),
    ],
)
def test_invalid_compaction_config_is_refused_with_its_rule(raw: dict[str, Any], rule: str) -> None:
    with pytest.raises(InvalidPolicy) as err:
        validate_compaction(raw)
    assert err.value.details["rule"] == rule
    assert err.value.code == "invalid_policy"


@pytest.mark.spec("R7.7")
def test_turn_triggers_alone_are_valid_and_target_is_free_of_the_ratio() -> None:
    p = validate_compaction({"context_ratio": None, "user_turns": 3, "target_context_ratio": 0.9})
    assert (p.context_ratio, p.user_turns, p.target_context_ratio) == (None, 3, 0.9)


@pytest.mark.spec("R7.7")
@given(ratio=st.floats(0.01, 0.99), target=st.floats(0.01, 0.99))
def test_target_must_be_below_an_enabled_ratio(ratio: float, target: float) -> None:
    raw = {"context_ratio": ratio, "target_context_ratio": target}
    if target < ratio:
        assert validate_compaction(raw).target_context_ratio == target
    else:
        with pytest.raises(InvalidPolicy):
            validate_compaction(raw)


def test_whole_policy_freezes_every_default_explicitly() -> None:
    d = validate_policy({"compaction": {"user_turns": 5}}).to_dict()
    assert d["compaction"] == {
        "context_ratio": 0.8,
        "user_turns": 5,
        "model_steps": None,
        "target_context_ratio": 0.6,
        "max_compaction_calls": 4,
        "retry_growth_ratio": 0.05,
        "job_timeout_s": 120.0,
        "summary_max_ratio": 0.15,
        "rollup": "auto",
    }
    with pytest.raises(InvalidPolicy):
        validate_policy({"hooks": []})
