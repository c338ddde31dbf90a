"""Whether a retraction may withdraw its target. Pure.

Planning (``domain.planning``) asks ``refusal`` for each ``record_retracted``; storage
(``storage.records.retraction``) loads the facts it needs under the session's lock, and planning
keeps them current across the batch (``note_record``, ``note_retraction``), so that the
answer is the same whichever batch an event lands in.

Two rules beyond "a known record that says or does something, not summarized":

- **Scope** (R13.1, R13.3: a thread has its own messages and a single writer). A thread
  retracts only records of its own view: records it wrote itself, and — for a run's main
  thread — the history it inherited (R2.2: records of earlier runs' main threads up to
  the run's snapshot boundary, visible to the session). A child may not retract its
  parent's records, nor a sibling's; a parent may not retract a child's either: the
  child's messages are the child's (what the parent accepted of it is its own
  ``child_result`` record, which it may retract). Refused as ``retraction_out_of_scope``
  and dead-lettered, like any event naming a scope it may not write.
- **Tool integrity** (R5.1, R3.5, R15.3). A tool outcome that a live call still waits for
  is not retracted (``retraction_of_awaited_outcome``): the call would be left without
  a result — every prepare of the thread refused as ``tool_results_pending`` — and the
  real result cannot be sent again (R3.1 keeps one result per operation, and re-running
  the call is exactly what R15.3 forbids). Reopening the call instead would let a
  retraction rewrite a call's real status. To withdraw a tool interaction, retract the
  call (the assistant message or the host's ``tool_call`` record) first: its outcome is
  then awaited by nothing and may be retracted too.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.contracts import (
    AssistantMessagePayload,
    ContextEvent,
    Payload,
    RecordKind,
    ToolCallPayload,
    ToolOutcomePayload,
    Visibility,
)

Thread = tuple[str, str]  # (run_id, instance_id)
CallKey = tuple[Thread, str]  # (thread, call_id)
# What a later run inherits (storage.records.threads: the inherited history's visibility).
INHERITED_VISIBILITY = frozenset({Visibility.SESSION, Visibility.ACTOR})

# What a retraction may withdraw: what was said or done. Lifecycle markers shape runs and
# a resource is withdrawn by revoking it (R15.3), not by retraction.
RETRACTABLE = frozenset(
    {
        RecordKind.USER_INPUT,
        RecordKind.SUPPLEMENT,
        RecordKind.ASSISTANT_MESSAGE,
        RecordKind.TOOL_CALL,
        RecordKind.TOOL_OUTCOME,
        RecordKind.CHILD_RESULT,
    }
)


@dataclass(frozen=True)
class RetractionTarget:
    """What planning a retraction needs to know of its target, loaded with the session
    under its lock (``storage.records.retraction``) or noted when the batch records it."""

    kind: str
    summarized: bool  # covered by a committed summary revision
    thread: Thread | None = None  # where it was written (None: session-scoped)
    # On its run's main thread and visible to the session: later runs inherit it (R2.2).
    inheritable: bool = False
    session_sequence: int = 0
    # the calls it makes (assistant message, tool_call) or answers (tool_outcome).
    call_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Retractor:
    """The thread a retraction is written in."""

    thread: Thread
    main: bool  # the main thread of its run
    through_session_sequence: int  # its run's snapshot boundary (R2.1)


@dataclass(frozen=True)
class Refusal:
    code: str
    message: str
    dead_letter: bool


def call_ids_of(payload: Payload) -> tuple[str, ...]:
    if isinstance(payload, AssistantMessagePayload):
        return tuple(c.call_id for c in payload.tool_calls)
    if isinstance(payload, (ToolCallPayload, ToolOutcomePayload)):
        return (payload.call_id,)
    return ()


def target_of(ev: ContextEvent, session_sequence: int, main: bool) -> RetractionTarget:
    """The facts of a record the batch just planned (``main``: written in its run's main
    thread), for a retraction later in the batch."""
    s = ev.scope
    thread = (s.run_id, s.instance_id) if s.run_id and s.instance_id else None
    return RetractionTarget(
        str(ev.kind),
        False,
        thread,
        main and ev.visibility in INHERITED_VISIBILITY,
        session_sequence,
        call_ids_of(ev.payload),
    )


def in_scope(by: Retractor, target: RetractionTarget) -> bool:
    """The target is in the retracting thread's view: its own, or inherited by a main
    thread (a child inherits nothing: what its parent transfers is material, R13.2)."""
    if target.thread == by.thread:
        return True
    return by.main and target.inheritable and target.session_sequence <= by.through_session_sequence


def refusal(
    tid: str, target: RetractionTarget, by: Retractor, live_calls: dict[CallKey, set[str]]
) -> Refusal | None:
    """Why retracting ``target`` (record ``tid``) from ``by`` is refused (None: it is
    not); ``live_calls``: the live records making each call (``note_record``)."""
    if not in_scope(by, target):
        return Refusal(
            "retraction_out_of_scope",
            f"{tid} is not a record of thread {by.thread[1]}'s view: a thread retracts only"
            " its own records (and a main thread its inherited history)",
            True,
        )
    if target.kind == RecordKind.RECORD_RETRACTED:
        return Refusal("retraction_of_retraction", f"{tid} is a retraction", False)
    if target.kind not in RETRACTABLE:
        return Refusal(
            "retraction_target_not_retractable", f"{tid} is a {target.kind} record", False
        )
    if target.summarized:
        return Refusal(
            "retraction_of_summarized_record",
            f"{tid} is covered by a committed summary: it cannot be withdrawn from it",
            True,
        )
    if target.kind == RecordKind.TOOL_OUTCOME and target.thread is not None:
        waiting = [c for c in target.call_ids if live_calls.get((target.thread, c))]
        if waiting:
            return Refusal(
                "retraction_of_awaited_outcome",
                f"{tid} is the result of call {waiting[0]}, which still waits for it:"
                " retract the call first (a result is never sent twice, R3.1)",
                False,
            )
    return None


def note_record(
    live_calls: dict[CallKey, set[str]], record_id: str, target: RetractionTarget
) -> None:
    """A record the batch planned: the calls it makes are live from here on."""
    if target.thread is None or target.kind == RecordKind.TOOL_OUTCOME:
        return
    for c in target.call_ids:
        live_calls.setdefault((target.thread, c), set()).add(record_id)


def note_retraction(
    live_calls: dict[CallKey, set[str]], record_id: str, target: RetractionTarget
) -> None:
    """An accepted retraction of ``record_id``: the calls it made wait no more."""
    if target.thread is None:
        return
    for c in target.call_ids:
        live_calls.get((target.thread, c), set()).discard(record_id)
