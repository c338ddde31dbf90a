"""The state one consumed batch is planned over, and the plan it yields: the touched
sessions (loaded under row locks by ``storage.records.session_states``), their runs, and
the records, runs, run changes and refusals the plan writes. The rules that fill them are
``domain.planning.batch`` and ``domain.planning.lifecycle``."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from domain.policy.retraction_rules import CallKey, RetractionTarget, Thread
from schemas.contracts import ContextEvent

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


@dataclass(frozen=True)
class DeadLettered:
    """A committed dead-letter refusal: why, and the message of the records topic it
    refused (``partition``, ``offset``)."""

    code: str
    message: str
    partition: int
    offset: int


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
    # The known keys dead-lettered from a message of the records topic -> its letter: that
    # message redelivered publishes the letter again (the first may have been lost
    # between the refusal's commit and the letter's publish).
    dead_lettered: dict[str, DeadLettered] = field(default_factory=dict)
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
    # The dead letters of refused messages redelivered (``SessionState.dead_lettered``):
    # published again, their refusals not written again (they are committed).
    letters_again: list[Rejection] = field(default_factory=list)
    new_runs: list[NewRun] = field(default_factory=list)
    run_changes: list[RunChange] = field(default_factory=list)
    new_threads: set[tuple[str, str, str]] = field(default_factory=set)
    touched_sessions: set[str] = field(default_factory=set)

    @property
    def redelivered_sessions(self) -> set[str]:
        """The sessions with a record of the batch that was committed before."""
        return {d.event.scope.session_id for d in self.duplicates}


def record_id_for(space_id: str, session_id: str, event_key: str) -> str:
    """Deterministic: a redelivered event maps to the same id it was committed under."""
    digest = hashlib.sha256(f"{space_id}\x1f{session_id}\x1f{event_key}".encode()).hexdigest()
    return f"rec_{digest[:32]}"
