"""The session processor's control decisions, pure: what a budget observation
does (R7, R9: trigger checks, R7.4 one job at a time, R15.3 expiry of a job in flight).

The processor reads the facts (``ObservationInputs``, declared with the effects in
``domain.compaction.control.effects``), calls these functions and hands the resulting
``ControlEffects`` to one writer (``storage.control_writer``); the
compaction request in the effects is published only after the transaction committed.
The outcome of a job is decided in ``domain.compaction.outcome``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from domain.compaction.control.effects import (
    ControlEffects,
    JobFinish,
    JobStart,
    NewJob,
    ObservationInputs,
    ObservationVerdict,
    TriggerReport,
)
from domain.compaction.gain import NO_GAIN
from domain.compaction.triggers import (
    DEFAULT_CACHE_TTL_MS,
    REBUILD_DUE,
    REBUILD_NOTE,
    REBUILD_STARTED,
    CompactionState,
    GainCheck,
    LastAttempt,
    Observation,
    TriggerDecision,
    evaluate_triggers,
    job_expired,
)
from domain.compaction.triggers import ratio_threshold as threshold
from domain.context.selection import OPEN_CALL
from schemas.wire import CompactionRequest, ObservabilityEvent


def redelivered(job_status: str | None, job_request: Mapping[str, Any] | None) -> ControlEffects:
    """An observation already checked changes nothing. If it started a job that is still
    waiting, its request may have been lost between our commit and its publish: it is
    published again (the worker and the commit both dedupe by job id)."""
    if job_status == "requested" and job_request is not None:
        return ControlEffects("", "", request=request_of(job_request))
    return ControlEffects("", "")


def judge_observation(inp: ObservationInputs, now_ms: int) -> ObservationVerdict:
    """Expire an overdue job (R15.3), then evaluate the triggers (R7, R9) on the view's
    counters since the reusable summary and the anti-storm memory that is left."""
    expiry = _expiry(inp, now_ms)
    cleared = "active_job_id" in expiry.state
    obs = inp.observation
    decision = evaluate_triggers(
        CompactionState(inp.counters, inp.baseline, None if cleared else inp.state.last_attempt),
        inp.policy,
        Observation(
            obs.estimated_input,
            obs.input_budget,
            obs.required_tokens,
            obs.compressible_tokens,
            obs.fingerprint,
            obs.held_by,
            obs.idle_ms,
            obs.cache_ttl_ms or DEFAULT_CACHE_TTL_MS,
        ),
        _gain_check(inp),
    )
    return ObservationVerdict(decision, None if cleared else inp.state.active_job_id, expiry)


def _gain_check(inp: ObservationInputs) -> GainCheck | None:
    """With prices, a ratio-started job must pay for itself: its summarizer billed at the
    compaction profile's prices, and a ``no_gain`` deferral only while the next call fits
    after the largest step seen in the view or the largest tool result the release lets
    in, whichever is larger."""
    if inp.prices is None:
        return None
    return GainCheck(
        inp.observation.fixed_overhead,
        inp.prices,
        inp.summarizer_overhead if inp.model_summarizer else 0,
        inp.model_summarizer,
        inp.summarizer_prices,
        max(inp.observation.largest_step_tokens, inp.result_cap),
    )


def _expiry(inp: ObservationInputs, now_ms: int) -> ControlEffects:
    """R15.3: a job in flight past its deadline (its request lost or unreadable, its
    worker dead) is recorded ``expired`` and let go, so that this very check may start
    another. The baseline does not move; a late outcome of the job is ignored."""
    row, job, ev = inp.state, inp.active_job, inp.event
    if row.active_job_id is None:
        return ControlEffects(ev.session_id, inp.lineage)
    finished: tuple[JobFinish, ...] = ()
    notes: tuple[ObservabilityEvent, ...] = ()
    if job is not None and job.status == "requested":
        requested_at = int(job.request["requested_at_ms"])
        if not job_expired(requested_at, inp.policy.job_timeout_s, now_ms):
            return ControlEffects(ev.session_id, inp.lineage)
        reason = f"no outcome within {inp.policy.job_timeout_s:g}s"
        finished = (JobFinish(row.active_job_id, "expired", "deadline", reason),)
        notes = (
            ObservabilityEvent(
                "compaction_finished",
                ev.session_id,
                job.run_id,
                job.instance_id,
                now_ms,
                job.request["policy_revision"],
                purpose="compaction",
                decision="expired",
                reason=reason,
                job_id=row.active_job_id,
                stage="deadline",
                budget_before=job.request["budget_before"],
                elapsed_ms=float(now_ms - requested_at),
            ),
        )
    # (A pointer to a job that is unknown or already finished is cleared the same way.)
    # the anti-storm memory of the lost attempt goes too: it never produced a result, so
    # the same state may be tried again (R9.4 forbids repeating a finished attempt).
    state = {"active_job_id": None, "last_attempt": None}
    return ControlEffects(ev.session_id, inp.lineage, state, finished, notes=notes)


def _measured(inp: ObservationInputs) -> dict[str, Any]:
    """What the observation tells the state of the view's size. The pre-emptive estimate
    is resynced with what Prepare measured if Prepare measured the view under the summary
    it now counts from: a view measured under a summary committed over since would undo
    that commit's replacement of its covered tokens."""
    obs = inp.observation
    state: dict[str, Any] = {
        "fixed_overhead": obs.fixed_overhead,
        "input_budget": obs.input_budget,
        "required_tokens": obs.required_tokens,
    }
    if obs.summary_id == inp.summary_id:
        state["view_tokens"] = obs.estimated_input - obs.fixed_overhead
    return state


def observation_effects(
    inp: ObservationInputs, verdict: ObservationVerdict, start: JobStart | None, now_ms: int
) -> ControlEffects:
    """The writes and publishes of one checked observation. ``start`` is required exactly
    when ``verdict.starts_job``."""
    obs, decision = inp.observation, verdict.decision
    state = {**verdict.expiry.state, **_measured(inp)}
    new_job: NewJob | None = None
    job_id: str | None = None
    reason: str | None
    if decision.start_job and verdict.active_job_id is not None:
        kind, reason, job_id = "suppressed", "job_in_flight", verdict.active_job_id  # R7.4
    elif not decision.start_job:
        kind, reason = _no_job_kind(decision.reason), decision.reason
        if kind == "deferred":
            # Remember the state so the same state never triggers a busy loop (R9.4).
            state["deferral_reason"] = decision.reason
            state["last_attempt"] = _attempt_of(inp, deferred_for=decision.reason)
    else:
        if start is None:
            raise ValueError("a job starts: its id and task version are needed")
        kind, reason, job_id = "job_started", None, start.job_id
        new_job = NewJob(_request(inp, decision, start, now_ms), inp.counters)
        state.update(
            active_job_id=start.job_id,
            deferral_reason=None,
            attempts=inp.state.attempts + 1,
            last_attempt=_attempt_of(inp, decision),
        )
    report = TriggerReport(
        inp.event.run_id,
        inp.event.event_key,
        decision,
        kind,
        reason,
        job_id,
        inp.policy_revision,
        obs.view_watermark,
        inp.counters,
        inp.baseline,
    )
    request = new_job.request if new_job is not None else _resent(inp, verdict, now_ms)
    return ControlEffects(
        inp.event.session_id,
        inp.lineage,
        state,
        verdict.expiry.finished,
        report,
        new_job,
        notes=(*verdict.expiry.notes, _trigger_note(inp, report, now_ms)),
        request=request,
    )


def _resent(
    inp: ObservationInputs, verdict: ObservationVerdict, now_ms: int
) -> CompactionRequest | None:
    """The request of the lineage's job in flight, published again once it has waited a
    quarter of its timeout (R15.3): it may have been lost between the commit that started
    it and its publish (a processor killed in between, the batch then redelivered as
    duplicates), and otherwise the lineage would wait for its expiry. A worker takes a
    session's requests in order and answers a job it finished from its saved outcome, so
    a request sent twice never calls the model twice."""
    job = inp.active_job
    if job is None or job.job_id != verdict.active_job_id or job.status != "requested":
        return None
    waited_ms = now_ms - int(job.request["requested_at_ms"])
    if waited_ms < inp.policy.job_timeout_s * 1000 * RESEND_SHARE:
        return None
    try:
        return request_of(job.request)
    except (KeyError, TypeError, ValueError):  # unreadable: it expires (``_expiry``)
        return None


RESEND_SHARE = 0.25  # of a job's timeout, before its request is published again


def _no_job_kind(reason: str | None) -> str:
    if reason == "below_thresholds":
        return "none"
    if reason in ("nothing_compressible", NO_GAIN) or (reason or "").startswith(OPEN_CALL):
        return "deferred"
    return "suppressed"


def _attempt_of(
    inp: ObservationInputs, starts: TriggerDecision | None = None, deferred_for: str | None = None
) -> LastAttempt:
    """The anti-storm memory of this check. ``starts``: the decision that starts a job —
    marked when it is the one rebuild after a version conflict; without one
    (a deferral), a rebuild still due or under way stays so, and a deferral for no gain
    is marked as one (no job ran: the hard budget may still force one)."""
    obs, last = inp.observation, inp.state.last_attempt
    if starts is not None:
        rebuild = REBUILD_STARTED if REBUILD_NOTE in starts.notes else ""
    elif last is not None and last.rebuild in (REBUILD_DUE, REBUILD_STARTED):
        rebuild = last.rebuild
    elif deferred_for == NO_GAIN:
        rebuild = NO_GAIN
    else:
        rebuild = last.rebuild if last else ""
    return LastAttempt(
        obs.fingerprint,
        obs.compressible_tokens,
        inp.counters.minus(inp.baseline),
        obs.input_budget,
        obs.required_tokens,
        rebuild,
    )


def _request(
    inp: ObservationInputs, decision: TriggerDecision, start: JobStart, now_ms: int
) -> CompactionRequest:
    ev, obs = inp.event, inp.observation
    return CompactionRequest(
        job_id=start.job_id,
        session_id=ev.session_id,
        run_id=ev.run_id,
        instance_id=ev.instance_id,
        view_watermark=obs.view_watermark,
        parent_summary_id=inp.summary_id,
        policy_revision=inp.policy_revision,
        task_version=start.task_version,
        plan_version=start.plan_version,
        constraints_version=start.constraints_version,
        trigger_reasons=decision.fired,
        budget_before=obs.estimated_input,
        input_budget=obs.input_budget,
        target_tokens=threshold(inp.policy.target_context_ratio, obs.input_budget),
        max_calls=inp.policy.max_compaction_calls,
        requested_at_ms=now_ms,
    )


def _trigger_note(inp: ObservationInputs, report: TriggerReport, now_ms: int) -> ObservabilityEvent:
    ev, obs, decision = inp.event, inp.observation, report.decision
    return ObservabilityEvent(
        "trigger_check",
        ev.session_id,
        ev.run_id,
        ev.instance_id,
        now_ms,
        inp.policy_revision,
        purpose="action",
        decision=report.kind,
        reason=report.reason,
        fired=decision.fired,
        values=decision.values,
        thresholds=decision.thresholds,
        job_id=report.job_id,
        input_budget=obs.input_budget,
        estimated_input=obs.estimated_input,
    )


def request_of(raw: Mapping[str, Any]) -> CompactionRequest:
    """A stored request (``compaction_jobs.request``) as the message it was."""
    values = dict(raw)
    values["trigger_reasons"] = tuple(values["trigger_reasons"])
    return CompactionRequest(**values)
