"""Pure planning of one consumed batch: dedupe, sequences, runs, counters.

No I/O here. The processor loads the touched sessions' state (under row locks), calls
``plan_batch``, then writes the plan in one PostgreSQL transaction. Because one
partition's sessions have a single writer (DESIGN.md), planning sequentially over the
batch in offset order is the whole concurrency story.
"""

from __future__ import annotations

from domain.planning.lifecycle import apply_lifecycle
from domain.planning.state import (
    SCOPE_MISMATCH,
    BatchPlan,
    Incoming,
    NewRecord,
    Rejection,
    SessionState,
    record_id_for,
)
from domain.policy.retraction_rules import (
    Retractor,
    note_record,
    note_retraction,
    refusal,
    target_of,
)
from schemas.contracts import (
    AssistantMessagePayload,
    ConstraintPayload,
    ContextEvent,
    RecordKind,
    RetractionPayload,
)


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
        letter = st.dead_lettered.get(ev.event_key)
        if letter is not None and (letter.partition, letter.offset) == (inc.partition, inc.offset):
            plan.letters_again.append(Rejection(inc, letter.code, letter.message, True))
        return
    refusal = (
        retraction_refusal(inc, st) or constraint_refusal(inc, st) or apply_lifecycle(inc, st, plan)
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


def _count(ev: ContextEvent, st: SessionState) -> None:
    """R8.2: +1 per saved valid action response of the main thread. Compaction and
    completion calls, and child instances' steps, never add to the session's counter."""
    p = ev.payload
    if isinstance(p, AssistantMessagePayload) and p.purpose == "action":
        run = st.runs.get(ev.scope.run_id or "")
        if run is not None and run.main_instance_id == ev.scope.instance_id:
            st.model_steps += 1
