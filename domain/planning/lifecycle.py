"""A run's lifecycle within a batch (R1.2, R1.3): starting, resuming, finishing and
cancelling runs, the keys of those transitions, and which run takes appends."""

from __future__ import annotations

from domain.planning.state import (
    BatchPlan,
    Incoming,
    NewRun,
    Rejection,
    RunChange,
    RunState,
    SessionState,
)
from schemas.contracts import ContextEvent, RecordKind, ResourceActivationPayload
from schemas.validation import RUN_SCOPED


def lifecycle_key(kind: RecordKind, run: RunState) -> str:
    """The event key of a resume, finish or cancel of ``run`` when the caller names none,
    derived from the run's durable lifecycle counters: the same for a retry, new for the
    next transition, whichever client (or restarted runtime) asks.

    A resume is "the resume after the run's n-th end": accepting it ends nothing, so a
    retry derives the same key (a duplicate); the next resume follows another end. A
    refused key stays refused (redelivery must not change an outcome), so each refusal
    gives the next attempt a key of its own. An end is "the end of the run's n-th
    resumption": a retry after it was accepted derives the same key; the run can end
    again only after another resume, which moves n.
    """
    if kind is RecordKind.RUN_RESUMED:
        key = f"run_resumed:{run.run_id}:{run.ends}"
        return f"{key}:{run.refused_resumes}" if run.refused_resumes else key
    if kind in (RecordKind.RUN_FINISHED, RecordKind.RUN_CANCELLED):
        return f"{kind}:{run.run_id}:{run.resumes}"
    raise ValueError(f"{kind} is not a resume, finish or cancel")


def accepts_appends(ev: ContextEvent, run: RunState, active_run_id: str | None) -> bool:
    """R1.3/R8.2: only the session's active run takes appends — its main thread and its
    child instances alike. An event for a finished or cancelled run (a late result, a
    runtime that did not notice the run ended) is refused, never recorded or counted;
    resuming the run (R1.2) makes it active again. Exempt: a revocation, which withdraws
    a resource from every view and must never be refused because of the handle it came
    through."""
    p = ev.payload
    if isinstance(p, ResourceActivationPayload) and not p.active:
        return True
    return run.status == "active" and active_run_id == run.run_id


def apply_lifecycle(inc: Incoming, st: SessionState, plan: BatchPlan) -> Rejection | None:
    ev = inc.event
    run_id = ev.scope.run_id or ""
    run = st.runs.get(run_id)
    if ev.kind is RecordKind.RUN_STARTED:
        return _start_run(inc, st, plan, run_id, run)
    if run is None:
        if ev.kind not in RUN_SCOPED and ev.scope.run_id is None:
            return None  # session-scoped (e.g. a resource activated for the session)
        return Rejection(inc, "unknown_run", f"run {run_id} was never started", True)
    if ev.kind is RecordKind.RUN_RESUMED:
        return _resume_run(inc, st, plan, run)
    if ev.kind in (RecordKind.RUN_FINISHED, RecordKind.RUN_CANCELLED):
        if run.status != "active":
            return Rejection(inc, "run_not_active", f"run {run_id} is {run.status}", False)
        run.status = "finished" if ev.kind is RecordKind.RUN_FINISHED else "cancelled"
        run.ends += 1
        if st.active_run_id == run_id:
            st.active_run_id = None
        plan.run_changes.append(RunChange.of(st.session_id, run))
    elif not accepts_appends(ev, run, st.active_run_id):
        # Invalid input, like an unknown run: dead-lettered (the bytes are kept) and its
        # key remembered, so a redelivery stays refused.
        return Rejection(
            inc,
            "run_not_active",
            f"run {run_id} is {run.status}: resume it before appending to it",
            True,
        )
    return None


def _start_run(
    inc: Incoming, st: SessionState, plan: BatchPlan, run_id: str, run: RunState | None
) -> Rejection | None:
    if run is not None:
        return Rejection(inc, "run_exists", f"run {run_id} was already started", True)
    if st.active_run_id is not None:
        return Rejection(
            inc, "run_active", f"run {st.active_run_id} is active: wait for it or cancel it", False
        )
    main = inc.event.scope.instance_id or ""
    st.runs[run_id] = RunState(run_id, main, "active")
    st.active_run_id = run_id
    st.run_boundaries[run_id] = st.next_session_sequence - 1  # R2.1, as NewRun's below
    st.user_turns += 1  # R8.1: counted at run start, before its first model request
    plan.new_runs.append(
        NewRun(
            st.session_id,
            run_id,
            main,
            st.next_session_sequence - 1,
            st.next_session_sequence,
            st.policy_revision,
            st.user_turns,
            st.model_steps,
        )
    )
    return None


def _resume_run(
    inc: Incoming, st: SessionState, plan: BatchPlan, run: RunState
) -> Rejection | None:
    if st.active_run_id not in (None, run.run_id):
        # Counted (durably) so that the next resume derives a fresh key.
        run.refused_resumes += 1
        plan.run_changes.append(RunChange.of(st.session_id, run))
        return Rejection(
            inc, "run_active", f"run {st.active_run_id} is active: wait for it or cancel it", False
        )
    run.status = "active"
    run.resumes += 1
    st.active_run_id = run.run_id
    plan.run_changes.append(RunChange.of(st.session_id, run))
    return None
