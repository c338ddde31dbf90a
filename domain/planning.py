"""Pure planning of one consumed batch: dedupe, sequences, runs, counters.

No I/O here. The processor loads the touched sessions' state (under row locks), calls
``plan_batch``, then writes the plan in one PostgreSQL transaction. Because one
partition's sessions have a single writer (DESIGN.md), planning sequentially over the
batch in offset order is the whole concurrency story.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

# RETRACTABLE and RetractionTarget are re-exported: storage and tests import them here.
from domain.policy.retraction_rules import RETRACTABLE as RETRACTABLE
from domain.policy.retraction_rules import (
    CallKey,
    Retractor,
    Thread,
    note_record,
    note_retraction,
    refusal,
    target_of,
)
from domain.policy.retraction_rules import RetractionTarget as RetractionTarget
from schemas.contracts import (
    AssistantMessagePayload,
    ConstraintPayload,
    ContextEvent,
    RecordKind,
    ResourceActivationPayload,
    RetractionPayload,
)
from schemas.validation import RUN_SCOPED

# An event naming a session of another space or actor than its own scope's: refused, and
# counted under its own (the signer's) space, never under the session it named.
SCOPE_MISMATCH = "scope_mismatch"


@dataclass(frozen=True)
class Incoming:
    event: ContextEvent
    partition: int
    offset: int
    token_count: int
    token_method: str
    # ``to_wire(event.payload)`` when the decoder already had it (the stored JSON).
    payload_wire: dict[str, Any] | None = None


@dataclass
class RunState:
    run_id: str
    main_instance_id: str
    status: str  # active | finished | cancelled
    # Lifecycle counters (durable in ``runs``): the keys of resume/finish/cancel derive
    # from them (``lifecycle_key``), never from a client's memory.
    resumes: int = 0  # accepted run_resumed
    ends: int = 0  # accepted run_finished / run_cancelled
    refused_resumes: int = 0


@dataclass
class SessionState:
    session_id: str
    space_id: str
    actor_id: str
    policy_revision: str
    next_session_sequence: int
    active_run_id: str | None
    revision: int
    user_turns: int
    model_steps: int
    runs: dict[str, RunState] = field(default_factory=dict)
    threads: dict[Thread, int] = field(default_factory=dict)  # -> next instance_sequence
    known_keys: set[str] = field(default_factory=set)
    known_operations: set[tuple[str, str]] = field(default_factory=set)
    # Targets of the batch's retractions (record_id -> facts), and the batch's own records.
    retraction_targets: dict[str, RetractionTarget] = field(default_factory=dict)
    # the live records making each call the batch's retractions may concern
    # (domain.policy.retraction_rules), and the snapshot boundary of each run (R2.1) they need.
    live_calls: dict[CallKey, set[str]] = field(default_factory=dict)
    run_boundaries: dict[str, int] = field(default_factory=dict)
    # Constraint ids ever set in the session, loaded when the batch retires one
    # (``storage.records.ingest``), and those the batch sets.
    constraint_ids: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class NewRecord:
    incoming: Incoming
    record_id: str
    session_sequence: int
    instance_sequence: int | None
    # R16: the producer saw an older thread revision. The result is kept and appended in
    # order anyway — never dropped, never a reason to call the model again — and the
    # conflict is reported (R18).
    revision_conflict: bool = False


@dataclass(frozen=True)
class Rejection:
    incoming: Incoming
    code: str
    message: str
    dead_letter: bool  # invalid input (dead-letter topic) vs a refused valid request


@dataclass(frozen=True)
class NewRun:
    session_id: str
    run_id: str
    main_instance_id: str
    through_session_sequence: int  # R2.1: the snapshot boundary, before run_started
    started_sequence: int
    policy_revision: str
    user_turns: int
    model_steps: int


@dataclass(frozen=True)
class RunChange:
    session_id: str
    run_id: str
    status: str
    resumes: int
    ends: int
    refused_resumes: int

    @classmethod
    def of(cls, session_id: str, run: RunState) -> RunChange:
        return cls(session_id, run.run_id, run.status, run.resumes, run.ends, run.refused_resumes)


@dataclass
class BatchPlan:
    records: list[NewRecord] = field(default_factory=list)
    duplicates: list[Incoming] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    new_runs: list[NewRun] = field(default_factory=list)
    run_changes: list[RunChange] = field(default_factory=list)
    new_threads: set[tuple[str, str, str]] = field(default_factory=set)
    touched_sessions: set[str] = field(default_factory=set)


def record_id_for(space_id: str, session_id: str, event_key: str) -> str:
    """Deterministic: a redelivered event maps to the same id it was committed under."""
    digest = hashlib.sha256(f"{space_id}\x1f{session_id}\x1f{event_key}".encode()).hexdigest()
    return f"rec_{digest[:32]}"


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


def plan_batch(batch: list[Incoming], sessions: dict[str, SessionState]) -> BatchPlan:
    """Plan the effects of ``batch`` (offset order) on ``sessions`` (mutated in place)."""
    plan = BatchPlan()
    for inc in batch:
        _plan_one(inc, sessions, plan)
    return plan


def _plan_one(inc: Incoming, sessions: dict[str, SessionState], plan: BatchPlan) -> None:
    ev = inc.event
    st = sessions.get(ev.scope.session_id)
    if st is None:
        plan.rejections.append(
            Rejection(inc, "unknown_session", f"session {ev.scope.session_id} is not open", True)
        )
        return
    if st.space_id != ev.scope.space_id or st.actor_id != ev.scope.actor_id:
        plan.rejections.append(
            Rejection(inc, SCOPE_MISMATCH, "space_id/actor_id differ from the session's", True)
        )
        return
    op_key = (ev.operation_id, str(ev.kind)) if ev.operation_id else None
    if ev.event_key in st.known_keys or (op_key and op_key in st.known_operations):
        plan.duplicates.append(inc)  # R3.1: redelivery is a no-op
        return
    refusal = (
        retraction_refusal(inc, st)
        or constraint_refusal(inc, st)
        or _apply_lifecycle(inc, st, plan)
    )
    if refusal is not None:
        plan.rejections.append(refusal)
        # Remember the key: a redelivered refused event must stay refused, not succeed
        # later because the state moved on.
        st.known_keys.add(ev.event_key)
        return
    run_id, instance_id = ev.scope.run_id, ev.scope.instance_id
    inst_seq: int | None = None
    if run_id and instance_id:
        thread = (run_id, instance_id)
        if thread not in st.threads:
            st.threads[thread] = 1
            plan.new_threads.add((st.session_id, run_id, instance_id))
        inst_seq = st.threads[thread]
        st.threads[thread] = inst_seq + 1
    _count(ev, st)
    seq = st.next_session_sequence
    st.next_session_sequence = seq + 1
    st.revision += 1
    st.known_keys.add(ev.event_key)
    if op_key:
        st.known_operations.add(op_key)
    # Thread revision = records already in the thread (the instance sequence before this).
    seen = (inst_seq - 1) if inst_seq is not None else None
    conflict = (
        ev.expected_revision is not None and seen is not None and (ev.expected_revision != seen)
    )
    record_id = record_id_for(st.space_id, st.session_id, ev.event_key)
    plan.records.append(NewRecord(inc, record_id, seq, inst_seq, conflict))
    plan.touched_sessions.add(st.session_id)
    _note_for_retractions(inc, st, record_id, seq)
    if ev.kind is RecordKind.CONSTRAINT_SET and isinstance(ev.payload, ConstraintPayload):
        st.constraint_ids.add(ev.payload.constraint_id)  # a later retirement may name it


def constraint_refusal(inc: Incoming, st: SessionState) -> Rejection | None:
    """Retiring a constraint the session never set is refused
    (``constraint_unknown``, dead-lettered like a retraction of an unknown record): a
    typo'd id must not look like a rule that was lifted."""
    ev = inc.event
    if ev.kind is not RecordKind.CONSTRAINT_RETIRED or not isinstance(
        ev.payload, ConstraintPayload
    ):
        return None
    cid = ev.payload.constraint_id
    if cid in st.constraint_ids:
        return None
    return Rejection(
        inc, "constraint_unknown", f"no constraint {cid!r} was set in session {st.session_id}", True
    )


def retraction_refusal(inc: Incoming, st: SessionState) -> Rejection | None:
    """Why a retraction is refused (None: it is recorded). Its target must be a
    record of this session (``retraction_target_unknown``, dead-lettered like an unknown
    run); ``domain.policy.retraction_rules.refusal`` says what else: in the thread's scope, not a
    lifecycle marker or a retraction, not summarized (the summary would still restate it:
    un-summarizing is a compaction decision, not a side effect of an undo), and not a
    result that a call still waits for."""
    ev = inc.event
    p = ev.payload
    if not isinstance(p, RetractionPayload):
        return None
    tid = p.target_record_id
    target = st.retraction_targets.get(tid)
    if target is None:
        return Rejection(
            inc, "retraction_target_unknown", f"no record {tid} in session {st.session_id}", True
        )
    run_id, instance_id = ev.scope.run_id or "", ev.scope.instance_id or ""
    run = st.runs.get(run_id)
    by = Retractor(
        (run_id, instance_id),
        run is not None and run.main_instance_id == instance_id,
        st.run_boundaries.get(run_id, 0),
    )
    found = refusal(tid, target, by, st.live_calls)
    return None if found is None else Rejection(inc, found.code, found.message, found.dead_letter)


def _note_for_retractions(inc: Incoming, st: SessionState, record_id: str, seq: int) -> None:
    """A later event of the batch may retract this record: it is known from here on, with
    the calls it makes; a retraction accepted here withdraws its target's calls."""
    ev = inc.event
    run = st.runs.get(ev.scope.run_id or "")
    main = run is not None and run.main_instance_id == ev.scope.instance_id
    target = target_of(ev, seq, main)
    st.retraction_targets[record_id] = target
    note_record(st.live_calls, record_id, target)
    if isinstance(ev.payload, RetractionPayload):
        withdrawn = st.retraction_targets.get(ev.payload.target_record_id)
        if withdrawn is not None:
            note_retraction(st.live_calls, ev.payload.target_record_id, withdrawn)


def _apply_lifecycle(inc: Incoming, st: SessionState, plan: BatchPlan) -> Rejection | None:
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


def _count(ev: ContextEvent, st: SessionState) -> None:
    """R8.2: +1 per saved valid action response of the main thread. Compaction and
    completion calls, and child instances' steps, never add to the session's counter."""
    p = ev.payload
    if isinstance(p, AssistantMessagePayload) and p.purpose == "action":
        run = st.runs.get(ev.scope.run_id or "")
        if run is not None and run.main_instance_id == ev.scope.instance_id:
            st.model_steps += 1
