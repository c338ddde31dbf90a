"""R7/R9 trigger evaluation: exact thresholds, OR into one job, anti-storm."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.compaction.triggers import (
    CompactionState,
    Counters,
    LastAttempt,
    Observation,
    evaluate_triggers,
    job_expired,
    ratio_threshold,
)
from domain.policy.context_policy import CompactionPolicy, validate_compaction
from schemas.errors import InvalidPolicy

RATIO_ONLY = CompactionPolicy()  # context_ratio 0.80, turn triggers off


def obs(
    estimated: int,
    budget: int = 100_000,
    compressible: int = 10_000,
    fp: str = "fp",
    required: int = 5_000,
) -> Observation:
    return Observation(estimated, budget, required, compressible, fp)


@pytest.mark.spec("R7.1", "R7.8")
def test_79999_does_not_trigger_and_80000_does_at_budget_100000() -> None:
    assert not evaluate_triggers(CompactionState(), RATIO_ONLY, obs(79_999)).start_job
    d = evaluate_triggers(CompactionState(), RATIO_ONLY, obs(80_000))
    assert d.start_job and d.fired == ("context_ratio",)
    assert d.thresholds["context_tokens"] == 80_000
    assert ratio_threshold(0.60, 100_000) == 60_000  # the target, R7.8


@pytest.mark.spec("R7.1", "R7.8")
@given(budget=st.integers(1, 10_000_000), ratio=st.sampled_from([0.5, 0.6, 0.75, 0.8, 0.9]))
def test_ratio_threshold_is_exact(budget: int, ratio: float) -> None:
    t = ratio_threshold(ratio, budget)
    assert t * 100 >= ratio * 100 * budget - 1e-6
    assert (t - 1) * 100 < round(ratio * 100) * budget


@pytest.mark.spec("R7.2", "R7.3", "R8.4")
def test_nth_question_and_mth_step_trigger_at_low_token_usage() -> None:
    turns = CompactionPolicy(context_ratio=None, user_turns=3)
    state = CompactionState(totals=Counters(5, 40), baseline=Counters(2, 30))
    d = evaluate_triggers(state, turns, obs(1_000))
    assert d.start_job and d.fired == ("user_turns",) and d.values["user_turns"] == 3
    steps = CompactionPolicy(context_ratio=None, model_steps=11)
    assert not evaluate_triggers(state, steps, obs(1_000)).start_job  # 10 since success
    state11 = CompactionState(totals=Counters(5, 41), baseline=Counters(2, 30))
    assert evaluate_triggers(state11, steps, obs(1_000)).fired == ("model_steps",)


@pytest.mark.spec("R7.4")
def test_several_conditions_at_once_are_one_job() -> None:
    policy = CompactionPolicy(user_turns=1, model_steps=1)
    d = evaluate_triggers(CompactionState(totals=Counters(1, 1)), policy, obs(90_000))
    assert d.start_job is True
    assert d.fired == ("context_ratio", "user_turns", "model_steps")


@pytest.mark.spec("R9.4")
def test_nothing_compressible_is_deferred_with_a_reason() -> None:
    d = evaluate_triggers(CompactionState(), RATIO_ONLY, obs(90_000, compressible=0))
    assert not d.start_job and d.reason == "nothing_compressible"
    assert d.fired == ("context_ratio",)


@pytest.mark.spec("R9.4")
def test_same_state_as_last_attempt_is_not_retried() -> None:
    last = LastAttempt("fp", 10_000, Counters(), 100_000, 5_000)
    d = evaluate_triggers(CompactionState(last_attempt=last), RATIO_ONLY, obs(90_000))
    assert not d.start_job and d.reason == "same_state_as_last_attempt"


@pytest.mark.spec("R9.5", "R19")
def test_required_content_steady_at_82_percent_retries_only_past_the_growth_gate() -> None:
    """Small additions each round: the summarizer is not called every round; a retry
    comes only once new compressible content reaches 5% of the budget."""
    state = CompactionState()
    started = []
    compressible = 10_000
    for rnd in range(40):
        compressible += 400  # small additions
        o = obs(82_000 + rnd, compressible=compressible, fp=f"fp{rnd}")
        d = evaluate_triggers(state, RATIO_ONLY, o)
        if d.start_job:
            started.append(rnd)
            # the attempt achieved no real reduction: remembered, baseline unmoved
            state = CompactionState(
                last_attempt=LastAttempt(o.fingerprint, compressible, Counters(), 100_000, 5_000)
            )
        else:
            assert d.reason == "below_retry_growth_gate"
    assert started[0] == 0
    assert all(b - a >= 5_000 // 400 for a, b in itertools.pairwise(started))
    assert len(started) <= 4


@pytest.mark.spec("R9.5")
def test_a_turn_trigger_reaching_its_threshold_first_time_still_fires_once() -> None:
    policy = CompactionPolicy(user_turns=2)
    last = LastAttempt("fp-old", 10_000, Counters(1, 0), 100_000, 5_000)
    state = CompactionState(totals=Counters(2, 0), last_attempt=last)
    d = evaluate_triggers(state, policy, obs(82_000, fp="fp-new"))
    assert d.start_job and d.notes == ("user_turns_first_reach",)


@pytest.mark.spec("R9.5")
def test_budget_change_allows_a_retry() -> None:
    last = LastAttempt("fp-old", 10_000, Counters(), 100_000, 5_000)
    d = evaluate_triggers(
        CompactionState(last_attempt=last), RATIO_ONLY, obs(70_000, budget=80_000, fp="fp-new")
    )
    assert d.start_job and d.notes == ("budget_or_required_changed",)


@pytest.mark.spec("R8.4")
@given(totals=st.integers(0, 1000), base=st.integers(0, 1000))
def test_since_last_success_is_totals_minus_baseline(totals: int, base: int) -> None:
    s = CompactionState(totals=Counters(totals, totals), baseline=Counters(base, base))
    assert s.since_success == Counters(totals - base, totals - base)


# --- no stuck session: the hard budget implies compaction, every job has a deadline ---

TURNS_ONLY = CompactionPolicy(context_ratio=None, user_turns=50)


@pytest.mark.spec("R9.7", "R15.3")
def test_over_the_hard_budget_starts_a_job_even_with_the_ratio_trigger_off() -> None:
    at = evaluate_triggers(CompactionState(), TURNS_ONLY, obs(100_000))
    assert not at.start_job and at.reason == "below_thresholds"  # at the budget: fits
    d = evaluate_triggers(CompactionState(), TURNS_ONLY, obs(100_001))
    assert d.start_job and d.fired == ("hard_budget",)
    assert d.values["hard_budget_tokens"] == 100_001
    assert d.thresholds["hard_budget_tokens"] == 100_001
    # Still no summary call on a state already tried (R9.4), nor with nothing to compact.
    last = LastAttempt("fp", 10_000, Counters(), 100_000, 5_000)
    same = evaluate_triggers(CompactionState(last_attempt=last), TURNS_ONLY, obs(100_001))
    assert not same.start_job and same.reason == "same_state_as_last_attempt"
    empty = evaluate_triggers(CompactionState(), TURNS_ONLY, obs(100_001, compressible=0))
    assert not empty.start_job and empty.reason == "nothing_compressible"


@pytest.mark.spec("R9.7")
def test_with_the_ratio_on_the_hard_budget_adds_no_second_condition() -> None:
    d = evaluate_triggers(CompactionState(), RATIO_ONLY, obs(120_000))
    assert d.start_job and d.fired == ("context_ratio",)


@pytest.mark.spec("R15.3")
def test_a_job_expires_at_its_deadline_exactly() -> None:
    assert not job_expired(1_000, 3, 3_999)
    assert job_expired(1_000, 3, 4_000)
    assert job_expired(1_000, 3, 60_000)
    assert not job_expired(1_000, 0.25, 1_249) and job_expired(1_000, 0.25, 1_250)
    assert not job_expired(1_000, 120, 1_000)  # just requested


@pytest.mark.spec("R15.3")
@given(
    requested=st.integers(0, 10**13),
    timeout=st.floats(0.001, 10_000, allow_nan=False),
    elapsed=st.integers(0, 10**10),
)
def test_expiry_is_monotonic_in_time(requested: int, timeout: float, elapsed: int) -> None:
    if job_expired(requested, timeout, requested + elapsed):
        assert job_expired(requested, timeout, requested + elapsed + 1)
        assert elapsed >= timeout * 1000 - 1
    else:
        assert elapsed < timeout * 1000


@pytest.mark.spec("R7.7", "R15.3")
def test_job_timeout_is_a_positive_number_validated_at_publish() -> None:
    assert validate_compaction({}).job_timeout_s == 120.0
    assert validate_compaction({"job_timeout_s": 3}).job_timeout_s == 3.0
    assert validate_compaction({"job_timeout_s": 0.5}).job_timeout_s == 0.5
    for bad in (0, -1, True, "3", None, float("nan"), float("inf")):
        with pytest.raises(InvalidPolicy) as err:
            validate_compaction({"job_timeout_s": bad})
        assert err.value.details["rule"] == "positive_number"
        assert err.value.details["field"] == "job_timeout_s"


@pytest.mark.spec("R8.4", "R7.3")
@given(
    seen=st.tuples(st.integers(0, 500), st.integers(0, 500)),
    later=st.tuples(st.integers(0, 50), st.integers(0, 50)),
    baseline=st.tuples(st.integers(0, 600), st.integers(0, 600)),
)
def test_counters_as_seen_drop_what_overtook_the_observation_and_never_fall_below_the_baseline(
    seen: tuple[int, int], later: tuple[int, int], baseline: tuple[int, int]
) -> None:
    totals = Counters(seen[0] + later[0], seen[1] + later[1])
    base = Counters(*baseline)
    out = totals.as_seen(Counters(*later), base)
    assert out == Counters(max(seen[0], baseline[0]), max(seen[1], baseline[1]))
    assert out.minus(base).user_turns >= 0 and out.minus(base).model_steps >= 0
    assert totals.as_seen(Counters(), Counters()) == totals  # nothing came after
