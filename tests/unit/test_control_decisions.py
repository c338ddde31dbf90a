"""The processor's control decisions as pure functions (issue 11): no database, no Kafka —
facts in, ``ControlEffects`` out (``domain.compaction.control``,
``domain.compaction.outcome``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.compaction.control.effects import (
    ControlEffects,
    JobRow,
    JobStart,
    LockedState,
    ObservationInputs,
)
from domain.compaction.control.observation import (
    judge_observation,
    observation_effects,
    redelivered,
)
from domain.compaction.outcome import OutcomeInputs, decide_outcome
from domain.compaction.triggers import Counters, LastAttempt, ratio_threshold
from domain.policy.context_policy import validate_compaction
from schemas.wire import BudgetObservation, CompactionOutcome, ControlEvent

NOW = 1_700_000_000_000
BUDGET = 1000


def obs(
    estimated: int, compressible: int = 600, summary: str | None = "sum-0"
) -> BudgetObservation:
    return BudgetObservation(estimated, BUDGET, 100, 50, compressible, 7, summary, "fp", "pol-1")


def inputs(estimated: int, **kw: object) -> ObservationInputs:
    o = obs(estimated)
    base = ObservationInputs(
        ControlEvent("obs-1", "s1", "run-1", "main", NOW, o),
        o,
        "main",
        validate_compaction({"context_ratio": 0.8, "job_timeout_s": 60}),
        "pol-1",
        LockedState(None, None, attempts=2),
        None,
        Counters(3, 4),
        Counters(1, 1),
        "sum-0",
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def job(status: str = "requested", requested_at_ms: int = NOW) -> JobRow:
    request = {
        "requested_at_ms": requested_at_ms,
        "policy_revision": "pol-1",
        "budget_before": 900,
        "task_version": 2,
        "target_tokens": 500,
        "trigger_reasons": ["context_ratio"],
        "view_watermark": 7,
    }
    return JobRow("cmp_1", status, "main", "run-1", "main", request, Counters(3, 4))


def decide(inp: ObservationInputs) -> tuple[bool, ControlEffects]:
    verdict = judge_observation(inp, NOW)
    start = JobStart("cmp_new", 2) if verdict.starts_job else None
    return verdict.starts_job, observation_effects(inp, verdict, start, NOW)


@pytest.mark.spec("R7.1", "R7.4")
def test_a_trigger_that_fires_starts_one_job_and_requests_it() -> None:
    inp = inputs(900)
    verdict = judge_observation(inp, NOW)
    fx = observation_effects(inp, verdict, JobStart("cmp_new", 2), NOW)
    assert fx.request is not None and fx.new_job is not None
    assert (fx.request.job_id, fx.request.task_version) == ("cmp_new", 2)
    assert fx.request.parent_summary_id == "sum-0"
    assert fx.request.target_tokens == ratio_threshold(inp.policy.target_context_ratio, BUDGET)
    assert fx.report is not None and (fx.report.kind, fx.report.job_id) == (
        "job_started",
        "cmp_new",
    )
    assert fx.state["active_job_id"] == "cmp_new" and fx.state["attempts"] == 3
    # R9.4: the attempt is remembered with the counters since the reused summary.
    assert fx.state["last_attempt"] == LastAttempt("fp", 600, Counters(2, 3), BUDGET, 100)
    assert fx.new_job.observed == Counters(3, 4)  # R8.4: the baseline it will move to


def test_a_starting_job_needs_its_id_and_task_version() -> None:
    inp = inputs(900)
    with pytest.raises(ValueError):
        observation_effects(inp, judge_observation(inp, NOW), None, NOW)


@pytest.mark.spec("R7.4")
def test_a_job_in_flight_suppresses_another() -> None:
    inp = inputs(900, state=LockedState(None, "cmp_1"), active_job=job())
    starts, fx = decide(inp)
    assert not starts
    assert fx.request is None and fx.new_job is None and fx.report is not None
    assert (fx.report.kind, fx.report.reason) == ("suppressed", "job_in_flight")
    assert "active_job_id" not in fx.state


@pytest.mark.spec("R15.3")
def test_an_overdue_job_expires_and_the_same_check_starts_the_next() -> None:
    overdue = job(requested_at_ms=NOW - 61_000)
    inp = inputs(900, state=LockedState(LastAttempt("x", 1, Counters(), 1, 1), "cmp_1"))
    inp = replace(inp, active_job=overdue)
    starts, fx = decide(inp)
    assert starts
    assert [(f.job_id, f.status, f.stage) for f in fx.finished] == [
        ("cmp_1", "expired", "deadline")
    ]
    assert [n.decision for n in fx.notes] == ["expired", "job_started"]
    assert fx.state["active_job_id"] == "cmp_new"


@pytest.mark.spec("R15.3")
def test_a_job_waiting_a_quarter_of_its_timeout_has_its_request_published_again() -> None:
    """Its request may have been lost between the commit that started it and its publish:
    it is sent again (the worker answers a job it finished from its saved outcome), not
    waited for until it expires. The check itself stays suppressed, no job is added."""
    quarter = 15_000  # of job_timeout_s 60
    for waited, resent in ((quarter - 1, False), (quarter, True), (59_000, True)):
        waiting = job(requested_at_ms=NOW - waited)
        stored = {"job_id": "cmp_1", "session_id": "s1", "run_id": "run-1"}
        stored |= {"instance_id": "main", "parent_summary_id": "sum-0", "input_budget": 1000}
        waiting = replace(waiting, request={**waiting.request, **stored, "max_calls": 2})
        inp = inputs(900, state=LockedState(None, "cmp_1"), active_job=waiting)
        starts, fx = decide(inp)
        assert not starts and fx.new_job is None and fx.report is not None
        assert fx.report.reason == "job_in_flight" and fx.report.job_id == "cmp_1"
        assert (fx.request is not None) is resent, waited
        if fx.request is not None:
            assert (fx.request.job_id, fx.request.requested_at_ms) == ("cmp_1", NOW - waited)
    # A job whose request cannot be read is not sent: it expires (``_expiry``).
    unreadable = replace(job(), request={"requested_at_ms": NOW - 30_000})
    inp = inputs(900, state=LockedState(None, "cmp_1"), active_job=unreadable)
    assert decide(inp)[1].request is None


def test_a_job_within_its_deadline_is_left_alone() -> None:
    inp = inputs(900, state=LockedState(None, "cmp_1"), active_job=job(requested_at_ms=NOW - 1))
    assert judge_observation(inp, NOW).expiry.state == {}


@pytest.mark.spec("R9.4")
def test_nothing_compressible_is_deferred_and_remembered() -> None:
    o = obs(900, compressible=0)
    starts, fx = decide(inputs(900, observation=o))
    assert not starts
    assert fx.report is not None and fx.report.kind == "deferred"
    assert fx.state["deferral_reason"] == "nothing_compressible"
    assert isinstance(fx.state["last_attempt"], LastAttempt)


@pytest.mark.spec("R7.8")
@given(st.integers(min_value=0, max_value=BUDGET))
def test_a_job_starts_exactly_from_the_ratio_threshold(estimated: int) -> None:
    starts, fx = decide(inputs(estimated))
    assert starts == (estimated >= ratio_threshold(0.8, BUDGET))
    assert (fx.request is not None) == starts
    assert fx.report is not None
    assert fx.report.kind == ("job_started" if starts else "none")
    # Every check resyncs the estimate with what Prepare measured.
    assert fx.state["view_tokens"] == estimated - 50


@pytest.mark.spec("R7.8")
def test_a_view_measured_under_a_summary_committed_over_since_keeps_the_processors_estimate() -> (
    None
):
    """Prepare measured the view under ``sum-0``; the processor committed ``sum-1`` (which
    replaced the covered tokens by its own) before it read the observation: the
    measurement would undo that, so the estimate is left as the commit made it."""
    stale = inputs(900, observation=obs(900, summary="sum-0"), summary_id="sum-1")
    fx = decide(stale)[1]
    assert "view_tokens" not in fx.state
    assert (fx.state["fixed_overhead"], fx.state["input_budget"]) == (50, BUDGET)
    fresh = inputs(900, observation=obs(900, summary="sum-1"), summary_id="sum-1")
    assert decide(fresh)[1].state["view_tokens"] == 900 - 50


def test_a_redelivered_observation_republishes_only_a_waiting_request() -> None:
    stored = {**job().request, "job_id": "cmp_1", "session_id": "s1", "run_id": "run-1"}
    stored |= {"instance_id": "main", "parent_summary_id": None, "input_budget": BUDGET}
    stored |= {"max_calls": 3}
    assert redelivered("requested", stored).request is not None
    assert redelivered("committed", stored).request is None
    assert redelivered(None, None).state == {}


# --- outcomes ---------------------------------------------------------------------------

SUMMARY = json.dumps({"draft": {"goal": "g"}, "text": "summary"})


def outcome(status: str = "succeeded", **kw: object) -> CompactionOutcome:
    base = CompactionOutcome(
        "cmp_1",
        status,
        "summarize",
        summary_id="sum-1",
        parent_summary_id="sum-0",
        summary_json=SUMMARY,
        covered_record_ids=("r1", "r2"),
        summary_tokens=100,
        covered_tokens=600,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def outcome_inputs(
    out: CompactionOutcome, found: JobRow | None = None, **kw: object
) -> OutcomeInputs:
    ev = ControlEvent("out-1", "s1", "run-1", "main", NOW, out)
    base = OutcomeInputs(ev, out, found or job(), "pol-1", "sum-0", 2, 0, 0, 7)
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.mark.spec("R8.4")
def test_a_committed_summary_moves_the_baseline_in_the_same_effects() -> None:
    fx = decide_outcome(outcome_inputs(outcome()), NOW)
    assert fx.committed is True
    assert fx.summary is not None and fx.summary["summary_id"] == "sum-1"
    assert fx.summary["budget_after"] == 900 - 600 + 100
    assert fx.state["current_summary_id"] == "sum-1"
    assert (fx.state["baseline_user_turns"], fx.state["baseline_model_steps"]) == (3, 4)
    assert fx.view_tokens == (600, 100)
    assert [(f.status, f.stage) for f in fx.finished] == [("committed", "commit")]
    assert fx.notes[0].target_reached is True


@pytest.mark.spec("R11.6")
def test_a_version_conflict_rejects_and_releases_the_growth_gate() -> None:
    fx = decide_outcome(outcome_inputs(outcome(), current_summary_id="sum-other"), NOW)
    assert fx.committed is False and fx.summary is None
    assert fx.state == {
        "active_job_id": None,
        "deferral_reason": "version_conflict:parent_summary",
        # One job rebuilt on the new state may start past the growth gate (issue 28).
        "last_attempt": LastAttempt("", 0, Counters(), 0, 0, "due"),
    }
    assert "current_summary_id" not in fx.state  # R8.4: the baseline stays


@pytest.mark.spec("R8.4")
def test_no_real_reduction_is_rejected_and_keeps_the_anti_storm_memory() -> None:
    fx = decide_outcome(outcome_inputs(outcome(summary_tokens=700)), NOW)
    assert fx.committed is False
    assert fx.state == {"active_job_id": None, "deferral_reason": "no_real_reduction"}


@pytest.mark.spec("R8.4")
def test_a_failed_job_frees_the_lineage_without_moving_the_baseline() -> None:
    fx = decide_outcome(outcome_inputs(outcome("failed", reason="model_error")), NOW)
    assert fx.committed is False
    assert fx.state == {"active_job_id": None, "deferral_reason": "model_error"}
    assert [f.status for f in fx.finished] == ["failed"]


@pytest.mark.spec("R15.3")
def test_the_late_outcome_of_an_expired_job_is_ignored() -> None:
    fx = decide_outcome(outcome_inputs(outcome(), job("expired")), NOW)
    assert fx.committed is False and fx.state == {} and fx.finished == ()
    assert [(n.decision, n.reason) for n in fx.notes] == [("ignored", "job_expired")]


def test_an_outcome_of_an_unknown_job_changes_nothing() -> None:
    out = outcome()
    ev = ControlEvent("out-1", "s1", "run-1", "main", NOW, out)
    fx = decide_outcome(OutcomeInputs(ev, out, None), NOW)
    assert fx.committed is False and fx.state == {} and fx.notes == ()
