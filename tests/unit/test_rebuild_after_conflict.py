"""A job refused for a version conflict is followed by at most one job rebuilt on the
new state, never a loop, and the summarizer never runs twice on one state (issue 28,
R9.4, R9.5, R11.8). Pure: observations and outcomes through the processor's decisions,
with the anti-storm memory carried from one to the next as the one writer stores it."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest

from domain.compaction.control.effects import JobRow, JobStart, LockedState, ObservationInputs
from domain.compaction.control.observation import judge_observation, observation_effects
from domain.compaction.outcome import OutcomeInputs, after_conflict, decide_outcome
from domain.compaction.triggers import Counters, LastAttempt
from domain.policy.context_policy import validate_compaction
from schemas.wire import BudgetObservation, CompactionOutcome, ControlEvent

NOW = 1_700_000_000_000
BUDGET = 1000
# retry_growth_ratio 0.1: a retry needs 100 more compressible tokens (R9.5).
POLICY = validate_compaction({"context_ratio": 0.8, "retry_growth_ratio": 0.1})
SUMMARY = json.dumps({"draft": {"goal": "g"}, "text": "summary"})


@dataclass
class Lineage:
    """The ``compaction_state`` row as the one writer leaves it between events."""

    last: LastAttempt | None = None
    active: str | None = None
    jobs: int = 0
    refused: int = 0

    def check(self, fingerprint: str, compressible: int = 600) -> str:
        """A budget observation over the soft threshold (900 of 1,000); its report's kind."""
        o = BudgetObservation(900, BUDGET, 100, 50, compressible, 7, None, fingerprint, "p")
        inp = ObservationInputs(
            ControlEvent(f"obs-{fingerprint}", "s1", "run-1", "main", NOW, o),
            o,
            "main",
            POLICY,
            "p",
            LockedState(self.last, self.active),
            None if self.active is None else self._row(self.active),
            Counters(3, 4),
            Counters(1, 1),
            None,
        )
        verdict = judge_observation(inp, NOW)
        self.jobs += verdict.starts_job
        start = JobStart(f"cmp_{self.jobs}", 2) if verdict.starts_job else None
        fx = observation_effects(inp, verdict, start, NOW)
        self._apply(fx.state)
        assert fx.report is not None
        return fx.report.kind

    def conflict(self) -> None:
        """The job in flight comes back and is refused: its parent summary moved."""
        assert self.active is not None
        out = CompactionOutcome(
            self.active,
            "succeeded",
            "save",
            summary_id="sum-x",
            parent_summary_id=None,
            summary_json=SUMMARY,
            covered_record_ids=("r1",),
            summary_tokens=10,
            covered_tokens=600,
        )
        ev = ControlEvent("out", "s1", "run-1", "main", NOW, out)
        inp = OutcomeInputs(ev, out, self._row(self.active), "p", "sum-moved", 2, 0, 0, 7)
        fx = decide_outcome(replace(inp, last_attempt=self.last), NOW)
        assert fx.finished[0].reason == "version_conflict:parent_summary"
        self.refused += 1
        self._apply(fx.state)

    def _row(self, job_id: str) -> JobRow:
        request = {
            "requested_at_ms": NOW,
            "policy_revision": "p",
            "budget_before": 900,
            "task_version": 2,
            "target_tokens": 500,
            "trigger_reasons": ["context_ratio"],
            "view_watermark": 7,
        }
        return JobRow(job_id, "requested", "main", "run-1", "main", request, Counters(3, 4))

    def _apply(self, state: dict[str, object] | object) -> None:
        assert isinstance(state, dict)
        if "last_attempt" in state:
            self.last = state["last_attempt"]
        if "active_job_id" in state:
            self.active = state["active_job_id"]


@pytest.mark.spec("R11.8", "R9.4", "R15.3")
def test_a_refused_job_is_rebuilt_once_on_the_new_state_past_the_growth_gate() -> None:
    s = Lineage()
    assert s.check("v1") == "job_started"
    s.conflict()
    assert s.last is not None and s.last.rebuild == "due"
    assert s.check("v1") == "suppressed"  # the same state again: never twice (R9.4)
    assert s.check("v2") == "job_started"  # a new state: rebuilt, no growth needed
    assert s.last is not None and s.last.rebuild == "started"
    assert s.jobs == 2


@pytest.mark.spec("R11.8", "R9.4", "R9.5")
def test_a_conflict_that_persists_never_becomes_a_loop_of_jobs() -> None:
    s = Lineage()
    s.check("v1")
    for i in range(2, 12):  # every job refused; a check at every action prepare
        if s.active is not None:
            s.conflict()
        s.check(f"v{i}")
    assert (s.jobs, s.refused) == (2, 2)  # the job and its one rebuild
    assert s.check("v12") == "suppressed"
    # Real growth since the rebuilt job's state is what may start the next (R9.5).
    assert s.check("v13", compressible=700) == "job_started"


@pytest.mark.spec("R11.8", "R9.4")
def test_a_rebuild_still_due_survives_a_deferral_and_a_cleared_memory() -> None:
    s = Lineage()
    s.check("v1")
    s.conflict()
    assert s.check("v2", compressible=0) == "deferred"  # nothing compressible yet
    assert s.last is not None and s.last.rebuild == "due"
    assert s.check("v3") == "job_started"
    # A revocation clears the memory while a job runs: a rebuild is still due after it.
    assert after_conflict(None).rebuild == "due"
