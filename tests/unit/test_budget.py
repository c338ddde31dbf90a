"""domain/window/budget.py: InputBudget arithmetic and enforcement (R6, R10.4)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.context.tokens import ESTIMATE_METHOD
from domain.window.budget import ModelProfile, enforce, make_report
from schemas.errors import ContextBudgetExceeded, InvalidPolicy


def profile(**kw: object) -> ModelProfile:
    values: dict[str, object] = {
        "name": "m",
        "context_capacity": 128_000,
        "output_reserve": 8_000,
        "safety_margin": 2_000,
    }
    values.update(kw)
    return ModelProfile(**values)  # type: ignore[arg-type]


@pytest.mark.spec("R6.1")
def test_input_budget_worked_examples() -> None:
    assert profile().input_budget() == 118_000
    assert profile(platform_limit=64_000).input_budget() == 54_000
    assert profile(platform_limit=200_000).input_budget() == 118_000
    assert profile(input_limit=100_000).input_budget() == 100_000
    assert profile(input_limit=200_000).input_budget() == 118_000
    assert profile(platform_limit=64_000, input_limit=60_000).input_budget() == 54_000
    assert profile(platform_limit=64_000, input_limit=50_000).input_budget() == 50_000


@pytest.mark.spec("R6.1")
@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 2_000_000),
    reserve=st.integers(0, 200_000),
    margin=st.integers(0, 50_000),
    platform=st.none() | st.integers(1, 2_000_000),
    input_limit=st.none() | st.integers(1, 2_000_000),
)
def test_input_budget_formula(
    capacity: int, reserve: int, margin: int, platform: int | None, input_limit: int | None
) -> None:
    c = capacity if platform is None else min(capacity, platform)
    expected = c - reserve - margin
    if input_limit is not None:
        expected = min(input_limit, expected)
    p = profile(
        context_capacity=capacity,
        output_reserve=reserve,
        safety_margin=margin,
        platform_limit=platform,
        input_limit=input_limit,
    )
    if expected <= 0:
        with pytest.raises(InvalidPolicy):
            p.input_budget()
    else:
        assert p.input_budget() == expected


@pytest.mark.parametrize("field", ["context_capacity", "output_reserve", "safety_margin"])
def test_negative_or_non_integer_values_are_invalid(field: str) -> None:
    with pytest.raises(InvalidPolicy) as info:
        profile(**{field: -1}).input_budget()
    assert info.value.details["field"] == field
    with pytest.raises(InvalidPolicy):
        profile(**{field: 10.5}).input_budget()


def test_profile_without_room_for_input_is_invalid() -> None:
    with pytest.raises(InvalidPolicy):
        profile(context_capacity=10_000, output_reserve=8_000, safety_margin=2_000).input_budget()
    assert (
        profile(context_capacity=10_001, output_reserve=8_000, safety_margin=2_000).input_budget()
        == 1
    )


@pytest.mark.spec("R6.5")
@pytest.mark.parametrize(
    "d",
    [
        {"name": "gpt-4o", "output_reserve": 1000, "safety_margin": 100},
        {"name": "gpt-4o", "context_capacity": None, "output_reserve": 1000, "safety_margin": 1},
        {"name": "gpt-4o", "context_capacity": 0, "output_reserve": 1000, "safety_margin": 100},
    ],
    ids=["missing", "null", "zero"],
)
def test_unknown_capacity_is_a_configuration_error(d: dict[str, object]) -> None:
    with pytest.raises(InvalidPolicy) as info:
        ModelProfile.from_dict(d)
    assert info.value.details.get("field") == "context_capacity"
    assert info.value.code == "invalid_policy"


def test_from_dict_valid_and_unknown_fields() -> None:
    p = ModelProfile.from_dict(
        {
            "name": "m",
            "context_capacity": 32_000,
            "output_reserve": 4_000,
            "safety_margin": 1_000,
            "counting": "estimate",
        }
    )
    assert p.input_budget() == 27_000 and p.counting == "estimate"
    with pytest.raises(InvalidPolicy):
        ModelProfile.from_dict({"name": "m", "context_capacity": 1000, "guess_capacity": True})
    with pytest.raises(InvalidPolicy):  # required field missing
        ModelProfile.from_dict({"name": "m", "context_capacity": 1000})
    with pytest.raises(InvalidPolicy):  # arithmetic leaves nothing
        ModelProfile.from_dict(
            {"name": "m", "context_capacity": 1000, "output_reserve": 900, "safety_margin": 100}
        )


# --- report and enforcement ---------------------------------------------------------------

_PROFILE = profile(context_capacity=110_000, output_reserve=8_000, safety_margin=2_000)  # 100k


def _report(items: dict[str, int], required: int, method: str = "tiktoken:cl100k_base"):
    return make_report(_PROFILE, items, required, method)


@pytest.mark.spec("R6.2", "R6.4")
def test_report_totals_items_and_labels_the_method() -> None:
    items = {"instructions": 1_000, "tool_schemas": 500, "history": 30_000, "envelope": 40}
    r = _report(items, 1_540, ESTIMATE_METHOD)
    assert r.input_budget == 100_000
    assert r.estimated_input == 31_540
    assert r.counting_method == "estimate:utf8_bytes"
    assert r.ratio == pytest.approx(0.3154)
    assert (r.safety_margin, r.output_reserve, r.context_capacity) == (2_000, 8_000, 110_000)
    d = r.to_dict()
    assert d["items"] == items and d["counting_method"] == "estimate:utf8_bytes"


@pytest.mark.spec("R6.3")
def test_estimate_equal_to_budget_is_sent() -> None:
    enforce(_report({"instructions": 10_000, "history": 90_000}, 10_000))


@pytest.mark.spec("R6.3", "R9.7")
def test_estimate_one_over_budget_is_refused_as_history_over_budget() -> None:
    items = {"instructions": 10_000, "history": 90_001}
    with pytest.raises(ContextBudgetExceeded) as info:
        enforce(_report(items, 10_000))
    d = info.value.details
    assert d["reason"] == "history_over_budget"
    assert d["items"] == items
    assert (d["input_budget"], d["estimated_input"], d["required"]) == (100_000, 100_001, 10_000)


@pytest.mark.spec("R6.3", "R10.4")
def test_required_alone_over_budget_is_itemized() -> None:
    items = {"instructions": 90_000, "skills": 5_000, "tool_schemas": 5_001, "history": 1}
    with pytest.raises(ContextBudgetExceeded) as info:
        enforce(_report(items, 100_001))
    err = info.value
    assert err.details["reason"] == "required_over_budget"
    assert err.details["items"] == items
    assert err.details["required"] == 100_001
    assert err.code == "context_budget_exceeded"
    assert err.to_dict()["details"]["items"]["tool_schemas"] == 5_001


@pytest.mark.spec("R6.3", "R10.4")
def test_required_exactly_at_budget_is_not_required_over_budget() -> None:
    with pytest.raises(ContextBudgetExceeded) as info:
        enforce(_report({"instructions": 100_000, "history": 1}, 100_000))
    assert info.value.details["reason"] == "history_over_budget"
    enforce(_report({"instructions": 100_000}, 100_000))


@pytest.mark.spec("R6.3")
@settings(max_examples=200, deadline=None)
@given(
    required=st.integers(0, 150_000),
    optional=st.integers(0, 150_000),
)
def test_enforce_decision(required: int, optional: int) -> None:
    items = {"instructions": required, "history": optional}
    report = _report(items, required)
    total = required + optional
    if total <= 100_000:
        enforce(report)
        return
    with pytest.raises(ContextBudgetExceeded) as info:
        enforce(report)
    expected = "required_over_budget" if required > 100_000 else "history_over_budget"
    assert info.value.details["reason"] == expected
    assert info.value.details["estimated_input"] == total


# --- R6.4: counting method named, never guessed ------------------------------------------


@pytest.mark.spec("R6.4")
def test_counting_label_names_the_tokenizer_or_the_labelled_estimate() -> None:
    from domain.window.budget import counting_label

    assert counting_label("cl100k_base", "tiktoken:cl100k_base") == "tiktoken:cl100k_base"
    assert counting_label("file:/m/x.tiktoken", "tiktoken_file:/m/x.tiktoken") == (
        "tiktoken_file:/m/x.tiktoken"
    )
    assert counting_label("estimate", "tiktoken:cl100k_base") == (
        "estimate:proxy=tiktoken:cl100k_base"
    )
    for unavailable in ("o200k_base", "file:/other.tiktoken"):
        with pytest.raises(InvalidPolicy) as info:
            counting_label(unavailable, "tiktoken:cl100k_base")
        assert info.value.details["rule"] == "counting_unavailable"
