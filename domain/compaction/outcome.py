"""What a compaction outcome does, pure: commit by the owner (R8.4, R11.6), the
late outcome of an expired job ignored (R15.3). The processor reads ``OutcomeInputs``,
calls ``decide_outcome`` and hands the ``ControlEffects`` to the one writer."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from domain.commit import Candidate, CommitDecision, Dependencies, budget_after, decide_commit
from domain.compaction.control.effects import ControlEffects, JobFinish, JobRow
from domain.compaction.triggers import REBUILD_DUE, REBUILD_STARTED, Counters, LastAttempt
from domain.frontier import Plan
from schemas.summary_body import parse_summary
from schemas.wire import CompactionOutcome, ControlEvent, ObservabilityEvent


@dataclass(frozen=True)
class OutcomeInputs:
    """The facts an outcome is decided on. Beyond ``job``, they are read only for a job
    still ``requested``; the dependencies (R11.6) only for a succeeded one."""

    event: ControlEvent
    outcome: CompactionOutcome
    job: JobRow | None
    policy_revision: str = ""  # the session's release now
    current_summary_id: str | None = None  # the job's view's reusable summary now
    task_version: int = 0  # user inputs + supplements up to the job's watermark now
    missing: int = 0  # covered records that do not exist
    revoked: int = 0  # covered records derived from a revoked resource
    view_through: int = 0  # the job's run's snapshot boundary
    plan: Plan = field(default_factory=Plan)  # the job's thread's plan now
    constraints_version: int = 0  # and its constraint records now
    last_attempt: LastAttempt | None = None  # the lineage's anti-storm memory now


def decide_outcome(inp: OutcomeInputs, now_ms: int) -> ControlEffects:
    job, out, ev = inp.job, inp.outcome, inp.event
    if job is None or job.status != "requested":
        # Unknown or already finished: a redelivered outcome changes nothing, and the late
        # outcome of an expired job never moves the baseline (R15.3).
        if job is not None and job.status == "expired":
            note = _note(inp, job, now_ms, "ignored", "job_expired")
            return ControlEffects(ev.session_id, job.lineage, notes=(note,), committed=False)
        return ControlEffects(ev.session_id, "", committed=False)
    if out.status != "succeeded":
        # R8.4: failure or deferral never moves the baseline; the anti-storm memory stays.
        return ControlEffects(
            ev.session_id,
            job.lineage,
            {"active_job_id": None, "deferral_reason": out.reason},
            (JobFinish(out.job_id, "failed", out.stage, out.reason),),
            notes=(_note(inp, job, now_ms, out.status, out.reason),),
            committed=False,
        )
    decision = commit_decision(inp, job)
    if not decision.commit:
        state: dict[str, Any] = {"active_job_id": None, "deferral_reason": decision.reason}
        if (decision.reason or "").startswith("version_conflict"):
            state["last_attempt"] = after_conflict(inp.last_attempt)
        return ControlEffects(
            ev.session_id,
            job.lineage,
            state,
            (JobFinish(out.job_id, "rejected", "commit", decision.reason),),
            notes=(_note(inp, job, now_ms, "rejected", decision.reason),),
            committed=False,
        )
    return _commit(inp, job, now_ms)


def after_conflict(last: LastAttempt | None) -> LastAttempt:
    """The anti-storm memory after a job was refused for a version conflict.

    The view the job summarized changed under it: the next check summarizes a different
    state, so the growth gate (R9.5) must not hold back one job rebuilt on it — over the
    hard budget nothing is sent until a job commits (R9.7). Only one: if the rebuilt job
    is refused too, the memory of its state stays and the ordinary retry gate decides, so
    a conflict that persists never becomes a loop of jobs and summarizer calls (R9.4)."""
    if last is None:  # nothing remembered (a revocation cleared it): no state to avoid
        return LastAttempt("", 0, Counters(), 0, 0, REBUILD_DUE)
    if last.rebuild == REBUILD_STARTED:
        return last
    return replace(last, rebuild=REBUILD_DUE)


def commit_decision(inp: OutcomeInputs, job: JobRow) -> CommitDecision:
    out, request = inp.outcome, job.request
    return decide_commit(
        Dependencies(
            inp.current_summary_id,
            inp.policy_revision,
            inp.task_version,
            inp.plan.version,
            inp.constraints_version,
        ),
        Candidate(
            out.parent_summary_id,
            request["policy_revision"],
            request["task_version"],
            out.summary_tokens,
            out.covered_tokens,
            not out.summary_json,
            inp.missing,
            inp.revoked,
            int(request.get("plan_version") or 0),
            int(request.get("constraints_version") or 0),
        ),
    )


def _commit(inp: OutcomeInputs, job: JobRow, now_ms: int) -> ControlEffects:
    out, request = inp.outcome, job.request
    after = budget_after(request["budget_before"], out.covered_tokens, out.summary_tokens)
    reached = after <= request["target_tokens"]
    observed = job.observed
    # R8.4: the baseline moves to the counters observed by the check that started the
    # job, in the same transaction as the summary revision.
    state = {
        "current_summary_id": out.summary_id,
        "baseline_user_turns": observed.user_turns,
        "baseline_model_steps": observed.model_steps,
        "last_attempt": None,
        "active_job_id": None,
        "deferral_reason": None,
    }
    note = _note(
        inp,
        job,
        now_ms,
        "committed",
        None if reached else "target_not_reached",
        budget_after=after,
        target_reached=reached,
    )
    return ControlEffects(
        inp.event.session_id,
        job.lineage,
        state,
        (JobFinish(out.job_id, "committed", "commit", None),),
        summary=_summary_row(inp, job, after),
        view_tokens=(out.covered_tokens, out.summary_tokens),
        notes=(note,),
        committed=True,
    )


def _summary_row(inp: OutcomeInputs, job: JobRow, after: int) -> dict[str, Any]:
    out, request, observed = inp.outcome, job.request, job.observed
    # admitted, so well-formed (schemas/validation.py); a commit needs one (commit_decision)
    summary = parse_summary(out.summary_json or "")
    return {
        "summary_id": out.summary_id,
        "session_id": inp.event.session_id,
        "lineage": job.lineage,
        "parent_summary_id": out.parent_summary_id,
        "job_id": out.job_id,
        "view_run_id": job.run_id,
        "view_through": inp.view_through,
        "source_watermark": out.source_watermark,
        "covered_ranges": out.covered_ranges,
        "covered_record_ids": list(out.covered_record_ids),
        "summary": summary.draft,
        "summary_text": summary.text,
        "retained_reference_ids": list(summary.retained_reference_ids),
        "bound_tokens": summary.bound_tokens,
        "rollup": None if summary.rollup is None else summary.rollup.to_json(),
        "text_rules": list(summary.text_rules),
        "summary_tokens": out.summary_tokens,
        "covered_tokens": out.covered_tokens,
        "model_operation_id": out.model_operation_id,
        "policy_revision": inp.policy_revision,
        "trigger_reasons": list(request["trigger_reasons"]),
        "observed_watermark": request["view_watermark"],
        "counter_baseline": {
            "user_turns": observed.user_turns,
            "model_steps": observed.model_steps,
        },
        "budget_before": request["budget_before"],
        "budget_after": after,
        "target_reached": after <= request["target_tokens"],
    }


def _note(
    inp: OutcomeInputs,
    job: JobRow,
    now_ms: int,
    decision: str | None,
    reason: str | None,
    budget_after: int | None = None,
    target_reached: bool | None = None,
) -> ObservabilityEvent:
    ev, out = inp.event, inp.outcome
    expired = job.status == "expired"
    return ObservabilityEvent(
        "compaction_finished",
        ev.session_id,
        ev.run_id,
        ev.instance_id,
        now_ms,
        job.request["policy_revision"],
        purpose="compaction",
        decision=decision,
        reason=reason,
        job_id=out.job_id,
        stage=out.stage,
        budget_before=None if expired else job.request["budget_before"],
        model_calls=out.model_calls,
        elapsed_ms=None if expired else out.elapsed_ms,
        summary_tokens=None if expired else (out.summary_tokens or None),
        covered_tokens=None if expired else (out.covered_tokens or None),
        budget_after=budget_after,
        target_reached=target_reached,
    )
