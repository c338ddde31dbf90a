"""The session processor's handling of control events: budget observations (trigger
checks, R9) and compaction outcomes (commit by the owner, R8.4, R11.6).

Runs inside the batch transaction, after the batch's records, so counters and sequences
are those the records just produced. Returns the compaction requests to publish once the
transaction has committed.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field, replace

import asyncpg

from domain.commit import Candidate, Dependencies, budget_after, decide_commit
from domain.policy import CompactionPolicy, validate_compaction, validate_policy
from domain.selection import build_groups, select_prefix
from domain.triggers import (
    CompactionState,
    Counters,
    LastAttempt,
    Observation,
    evaluate_triggers,
    job_expired,
)
from domain.triggers import ratio_threshold as threshold
from schemas.wire import (
    BudgetObservation,
    CompactionOutcome,
    CompactionRequest,
    ControlEvent,
    ObservabilityEvent,
)
from storage import compaction as repo
from storage import compaction_state, processing
from storage.threads import inherited_records, snapshot_boundary, thread_records
from storage.view_state import ViewState, load_view_state
from streams.faults import describe_failure, is_transient


@dataclass(frozen=True)
class ControlFailure:
    """A control event that could not be applied: dead-lettered with this reason."""

    event: ControlEvent
    code: str
    reason: str


@dataclass(frozen=True)
class ControlResult:
    requests: list[CompactionRequest]
    observability: list[ObservabilityEvent]
    reports: int
    commits: int
    refusals: int
    failures: list[ControlFailure] = field(default_factory=list)


async def _lineage(conn: asyncpg.Connection, ev: ControlEvent) -> str:
    main = await processing.main_instance_id(conn, ev.session_id, ev.run_id)
    return "main" if main == ev.instance_id else ev.instance_id


async def apply_controls(conn: asyncpg.Connection, events: list[ControlEvent]) -> ControlResult:
    """Apply ``events`` in order, each in a savepoint of the caller's transaction: one
    that raises (anything but a transient infrastructure error, which is re-raised so
    the batch is retried) is undone alone and returned in ``failures`` for the dead-letter
    topic — it never stops the partition (R15.3)."""
    requests: list[CompactionRequest] = []
    notes: list[ObservabilityEvent] = []
    failures: list[ControlFailure] = []
    reports = commits = refusals = 0
    for ev in events:
        mark = len(notes)
        req: CompactionRequest | None = None
        ok: bool | None = None  # None: an observation; else whether the outcome committed
        try:
            async with conn.transaction():  # nested: a savepoint
                if isinstance(ev.body, BudgetObservation):
                    req = await _observe(conn, ev, ev.body, notes)
                else:
                    ok = await _outcome(conn, ev, ev.body, notes)
        except Exception as exc:
            if is_transient(exc):
                raise
            del notes[mark:]  # they describe effects the savepoint just undid
            failures.append(ControlFailure(ev, *describe_failure(exc)))
            continue
        if ok is None:
            reports += 1
            if req is not None:
                requests.append(req)
        else:
            commits += ok
            refusals += not ok
    return ControlResult(requests, notes, reports, commits, refusals, failures)


async def _observe(
    conn: asyncpg.Connection,
    ev: ControlEvent,
    obs: BudgetObservation,
    notes: list[ObservabilityEvent],
) -> CompactionRequest | None:
    done = await compaction_state.checked(conn, ev.session_id, ev.event_key)
    if done is not None:
        # Redelivered observation: already checked. If it started a job that is still
        # waiting, the request may have been lost between our commit and its publish —
        # publish it again (the worker and the commit both dedupe by job id).
        if done.job_status == "requested" and done.job_request is not None:
            return _request_of(done.job_request)
        return None
    ctx = await repo.session_context(conn, ev.session_id)
    policy = validate_compaction(repo.policy_compaction(ctx["context_policy"]))
    lineage = await _lineage(conn, ev)
    row = await repo.lock_state(conn, ev.session_id, lineage, ctx["policy_revision"])
    row = await _expire_overdue(conn, ev, row, policy, notes)
    # Resync the pre-emptive estimate with what Prepare really measured (drift fix).
    await repo.update_state(
        conn,
        row,
        fixed_overhead=obs.fixed_overhead,
        input_budget=obs.input_budget,
        view_tokens=obs.estimated_input - obs.fixed_overhead,
        required_tokens=obs.required_tokens,
    )
    # R2.6/R2.7: counters of this run's view, and the baseline of the newest summary
    # this view may reuse — not simply the newest summary of the session. (R13.1: a
    # child has its own counters and its own summary chain.) The job in flight is the
    # locked row's, not the view's: ``_expire_overdue`` may just have let it go.
    view = await _view(conn, ev.session_id, ev.run_id, lineage)
    totals, baseline = view.counters, view.baseline
    decision = evaluate_triggers(
        CompactionState(totals, baseline, row.last_attempt),
        policy,
        Observation(
            obs.estimated_input,
            obs.input_budget,
            obs.required_tokens,
            obs.compressible_tokens,
            obs.fingerprint,
        ),
    )
    args = (ev.session_id, lineage, ev.run_id, ev.event_key, decision)
    common = (ctx["policy_revision"], obs.view_watermark, totals, baseline)

    async def report(kind: str, reason: str | None, job_id: str | None) -> None:
        await repo.insert_report(conn, *args, kind, reason, job_id, *common)
        notes.append(
            ObservabilityEvent(
                "trigger_check",
                ev.session_id,
                ev.run_id,
                ev.instance_id,
                int(time.time() * 1000),
                ctx["policy_revision"],
                purpose="action",
                decision=kind,
                reason=reason,
                fired=decision.fired,
                values=decision.values,
                thresholds=decision.thresholds,
                job_id=job_id,
                input_budget=obs.input_budget,
                estimated_input=obs.estimated_input,
            )
        )

    if decision.start_job and row.active_job_id is not None:
        await report("suppressed", "job_in_flight", row.active_job_id)
        return None  # R7.4: one job at a time, whatever fired
    if not decision.start_job:
        kind = (
            "none"
            if decision.reason == "below_thresholds"
            else ("deferred" if decision.reason == "nothing_compressible" else "suppressed")
        )
        await report(kind, decision.reason, None)
        changes: dict[str, object] = {
            "fixed_overhead": obs.fixed_overhead,
            "input_budget": obs.input_budget,
        }
        if kind == "deferred":
            # Remember the state so the same state never triggers a busy loop (R9.4).
            changes["deferral_reason"] = decision.reason
            changes["last_attempt"] = repo.last_attempt_json(
                LastAttempt(
                    obs.fingerprint,
                    obs.compressible_tokens,
                    totals.minus(baseline),
                    obs.input_budget,
                    obs.required_tokens,
                )
            )
        await repo.update_state(conn, row, **changes)
        return None
    job_id = f"cmp_{uuid.uuid4().hex[:16]}"
    target = threshold(policy.target_context_ratio, obs.input_budget)
    req = CompactionRequest(
        job_id=job_id,
        session_id=ev.session_id,
        run_id=ev.run_id,
        instance_id=ev.instance_id,
        view_watermark=obs.view_watermark,
        parent_summary_id=view.summary_id,
        policy_revision=ctx["policy_revision"],
        task_version=await _task_version(
            conn, ev.session_id, lineage, ev.run_id, ev.instance_id, obs.view_watermark
        ),
        trigger_reasons=decision.fired,
        budget_before=obs.estimated_input,
        input_budget=obs.input_budget,
        target_tokens=target,
        max_calls=policy.max_compaction_calls,
        requested_at_ms=int(time.time() * 1000),
    )
    await report("job_started", None, job_id)
    await repo.insert_job(
        conn,
        job_id,
        ev.session_id,
        lineage,
        ev.run_id,
        ev.instance_id,
        {**req.__dict__, "trigger_reasons": list(req.trigger_reasons)},
        totals,
    )
    await repo.update_state(
        conn,
        row,
        active_job_id=job_id,
        deferral_reason=None,
        attempts=await compaction_state.next_attempt(conn, ev.session_id, lineage),
        fixed_overhead=obs.fixed_overhead,
        input_budget=obs.input_budget,
        last_attempt=repo.last_attempt_json(
            LastAttempt(
                obs.fingerprint,
                obs.compressible_tokens,
                totals.minus(baseline),
                obs.input_budget,
                obs.required_tokens,
            )
        ),
    )
    return req


async def _expire_overdue(
    conn: asyncpg.Connection,
    ev: ControlEvent,
    row: repo.StateRow,
    policy: CompactionPolicy,
    notes: list[ObservabilityEvent],
) -> repo.StateRow:
    """R15.3: a job in flight past its deadline (its request lost or unreadable, its worker
    dead) is recorded ``expired`` and let go, so that this very check may start another.
    The baseline does not move; a late outcome of the job is ignored (``_outcome``)."""
    if row.active_job_id is None:
        return row
    job = await repo.job(conn, row.active_job_id)
    now = int(time.time() * 1000)
    if job is not None and job["status"] == "requested":
        requested_at = int(job["request"]["requested_at_ms"])
        if not job_expired(requested_at, policy.job_timeout_s, now):
            return row
        reason = f"no outcome within {policy.job_timeout_s:g}s"
        await repo.finish_job(conn, row.active_job_id, "expired", "deadline", reason)
        notes.append(
            ObservabilityEvent(
                "compaction_finished",
                ev.session_id,
                job["run_id"],
                job["instance_id"],
                now,
                job["request"]["policy_revision"],
                purpose="compaction",
                decision="expired",
                reason=reason,
                job_id=row.active_job_id,
                stage="deadline",
                budget_before=job["request"]["budget_before"],
                elapsed_ms=float(now - requested_at),
            )
        )
    # (A pointer to a job that is unknown or already finished is cleared the same way.)
    # The anti-storm memory of the lost attempt goes too: it never produced a result, so
    # the same state may be tried again (R9.4 forbids repeating a finished attempt).
    await repo.update_state(conn, row, active_job_id=None, last_attempt=None)
    return replace(row, active_job_id=None, last_attempt=None)


async def _outcome(
    conn: asyncpg.Connection,
    ev: ControlEvent,
    out: CompactionOutcome,
    notes: list[ObservabilityEvent],
) -> bool:
    job = await repo.job(conn, out.job_id)
    if job is None or job["status"] != "requested":
        # Unknown or already finished: a redelivered outcome changes nothing, and the late
        # outcome of an expired job never moves the baseline (R15.3).
        if job is not None and job["status"] == "expired":
            notes.append(
                ObservabilityEvent(
                    "compaction_finished",
                    ev.session_id,
                    ev.run_id,
                    ev.instance_id,
                    int(time.time() * 1000),
                    job["request"]["policy_revision"],
                    purpose="compaction",
                    decision="ignored",
                    reason="job_expired",
                    job_id=out.job_id,
                    stage=out.stage,
                    model_calls=out.model_calls,
                )
            )
        return False

    def note(
        decision: str,
        reason: str | None,
        budget_after: int | None = None,
        target_reached: bool | None = None,
    ) -> None:
        notes.append(
            ObservabilityEvent(
                "compaction_finished",
                ev.session_id,
                ev.run_id,
                ev.instance_id,
                int(time.time() * 1000),
                job["request"]["policy_revision"],
                purpose="compaction",
                decision=decision,
                reason=reason,
                job_id=out.job_id,
                stage=out.stage,
                budget_before=job["request"]["budget_before"],
                model_calls=out.model_calls,
                elapsed_ms=out.elapsed_ms,
                summary_tokens=out.summary_tokens or None,
                covered_tokens=out.covered_tokens or None,
                budget_after=budget_after,
                target_reached=target_reached,
            )
        )

    ctx = await repo.session_context(conn, ev.session_id)
    row = await repo.lock_state(conn, ev.session_id, job["lineage"], ctx["policy_revision"])
    if out.status != "succeeded":
        # R8.4: failure or deferral never moves the baseline; the anti-storm memory stays.
        await repo.finish_job(conn, out.job_id, "failed", out.stage, out.reason)
        await repo.update_state(conn, row, active_job_id=None, deferral_reason=out.reason)
        note(out.status, out.reason)
        return False
    request = job["request"]
    decision = decide_commit(
        Dependencies(
            (await _view(conn, ev.session_id, job["run_id"], job["lineage"])).summary_id,
            ctx["policy_revision"],
            await _task_version(
                conn,
                ev.session_id,
                job["lineage"],
                job["run_id"],
                job["instance_id"],
                request["view_watermark"],
            ),
        ),
        Candidate(
            out.parent_summary_id,
            request["policy_revision"],
            request["task_version"],
            out.summary_tokens,
            out.covered_tokens,
            not out.summary_json,
            await repo.missing_records(conn, ev.session_id, list(out.covered_record_ids)),
            await repo.revoked_records(conn, ev.session_id, list(out.covered_record_ids)),
        ),
    )
    if not decision.commit:
        await repo.finish_job(conn, out.job_id, "rejected", "commit", decision.reason)
        changes: dict[str, object] = {"active_job_id": None, "deferral_reason": decision.reason}
        if (decision.reason or "").startswith("version_conflict"):
            # The view the job summarized changed under it: the next check summarizes a
            # different state, so the growth gate (R9.5, against repeating a summary of
            # the same state) must not hold it back — over the hard budget nothing is
            # sent until a job commits (R9.7).
            changes["last_attempt"] = None
        await repo.update_state(conn, row, **changes)
        note("rejected", decision.reason)
        return False
    after = budget_after(request["budget_before"], out.covered_tokens, out.summary_tokens)
    summary = json.loads(out.summary_json or "{}")
    observed = Counters(job["observed_user_turns"], job["observed_model_steps"])
    await repo.insert_summary(
        conn,
        summary_id=out.summary_id,
        session_id=ev.session_id,
        lineage=job["lineage"],
        parent_summary_id=out.parent_summary_id,
        job_id=out.job_id,
        view_run_id=job["run_id"],
        view_through=await snapshot_boundary(conn, ev.session_id, job["run_id"]),
        source_watermark=out.source_watermark,
        covered_ranges=out.covered_ranges,
        covered_record_ids=list(out.covered_record_ids),
        summary=summary["draft"],
        summary_text=summary["text"],
        retained_reference_ids=list(summary.get("retained_reference_ids") or []),
        bound_tokens=summary.get("bound_tokens"),
        rollup=summary.get("rollup"),
        summary_tokens=out.summary_tokens,
        covered_tokens=out.covered_tokens,
        model_operation_id=out.model_operation_id,
        policy_revision=ctx["policy_revision"],
        trigger_reasons=list(request["trigger_reasons"]),
        observed_watermark=request["view_watermark"],
        counter_baseline={"user_turns": observed.user_turns, "model_steps": observed.model_steps},
        budget_before=request["budget_before"],
        budget_after=after,
        target_reached=after <= request["target_tokens"],
    )
    # R8.4: the baseline moves to the counters observed by the check that started the
    # job, in the same transaction as the summary revision.
    await repo.update_state(
        conn,
        row,
        current_summary_id=out.summary_id,
        baseline_user_turns=observed.user_turns,
        baseline_model_steps=observed.model_steps,
        last_attempt=None,
        active_job_id=None,
        deferral_reason=None,
    )
    await compaction_state.replace_view_tokens(
        conn, ev.session_id, job["lineage"], out.covered_tokens, out.summary_tokens
    )
    await repo.finish_job(conn, out.job_id, "committed", "commit", None)
    note(
        "committed",
        None if after <= request["target_tokens"] else "target_not_reached",
        budget_after=after,
        target_reached=after <= request["target_tokens"],
    )
    return True


async def preempt(
    conn: asyncpg.Connection, session_ids: list[str], notes: list[ObservabilityEvent]
) -> list[CompactionRequest]:
    """Pre-emptive checks (DESIGN.md): from cached per-record counts and the last observed
    fixed overhead, start compaction before the runtime asks — so that it is usually done
    by the next prepare. Only the first crossing since the last success is handled here
    (no ``last_attempt``); retries stay with the prepare-time checks and their growth gate."""
    rows = await compaction_state.preempt_candidates(conn, session_ids)
    requests: list[CompactionRequest] = []
    for r in rows:
        policy = validate_compaction(repo.policy_compaction(r.context_policy))
        estimate = r.fixed_overhead + r.view_tokens
        sid, run_id = r.session_id, r.run_id
        view = await _view(conn, sid, run_id, "main")
        through, summary_id = view.through, view.summary_id
        state = CompactionState(view.counters, view.baseline)
        probe = evaluate_triggers(
            state, policy, Observation(estimate, r.input_budget, r.fixed_overhead, 1, "probe")
        )
        if not probe.start_job:
            continue
        main = await processing.main_instance_id(conn, sid, run_id)
        if main is None:  # an active run always has its row; nothing to check without
            continue
        records = await inherited_records(conn, sid, through) + await thread_records(
            conn, sid, run_id, main, through
        )
        covered = set(view.summary.covered_record_ids) if view.summary else set()
        records = [x for x in records if x.record_id not in covered]
        keep = validate_policy(r.context_policy).recent_complete_groups
        compressible = select_prefix(build_groups(records), keep).compressible_tokens
        last_seq = records[-1].session_sequence if records else through
        fingerprint = hashlib.sha256(
            f"pre:{last_seq}:{summary_id}:{r.release_policy}:{r.input_budget}".encode()
        ).hexdigest()[:32]
        obs = BudgetObservation(
            estimate,
            r.input_budget,
            # What Prepare last measured as required: the same number its checks compare
            # against, so a failed pre-emptive job does not look like "required changed".
            r.required_tokens or r.fixed_overhead,
            r.fixed_overhead,
            compressible,
            last_seq,
            summary_id,
            fingerprint,
            r.release_policy,
        )
        ev = ControlEvent(f"pre:{sid}:{last_seq}", sid, run_id, main, int(time.time() * 1000), obs)
        req = await _observe(conn, ev, obs, notes)
        if req is not None:
            requests.append(req)
    return requests


async def _view(conn: asyncpg.Connection, session_id: str, run_id: str, lineage: str) -> ViewState:
    """The compaction view of ``lineage`` ("main" or a child instance) for ``run_id``."""
    view = await load_view_state(
        conn, session_id, run_id, child_instance_id=None if lineage == "main" else lineage
    )
    if view is None:
        raise LookupError(f"session {session_id} not found")
    return view


async def _task_version(
    conn: asyncpg.Connection,
    session_id: str,
    lineage: str,
    run_id: str,
    instance_id: str,
    through: int,
) -> int:
    if lineage == "main":
        return await repo.task_version(conn, session_id, through)
    return await repo.thread_task_version(conn, session_id, run_id, instance_id, through)


def _request_of(raw: dict[str, object]) -> CompactionRequest:
    values = dict(raw)
    values["trigger_reasons"] = tuple(values["trigger_reasons"])  # type: ignore[arg-type]
    return CompactionRequest(**values)  # type: ignore[arg-type]
