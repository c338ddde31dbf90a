"""What the processor will do with an original ``dlq replay`` would send, and what it did.

Before sending, an original is checked as the processor would see it — a context event
(a control event is a service's, never replayed), with a well-formed envelope, keyed by
its session id, valid — and forecast from the database: the processor *applies* it, or
*ignores* it (its key already committed, its operation already recorded, its key refused
before: a refused key stays refused), or *refuses* it again (no such session, a session
of another scope). Only an original it will apply is sent. After sending, the replay
waits until the processor passed the sent offset and reads the answer back: the record
it committed, the refusal it recorded, or neither (refused before it could be attributed
to the session: the signature, most likely).
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.context.envelope import envelope_headers, envelope_of
from schemas import codec
from schemas.contracts import ContextEvent
from schemas.errors import InvalidEvent
from schemas.validation import validate_event
from schemas.wire import decode_event
from storage.dlq_replays import Known
from storage.records.outcomes import NOT_BINDING

CONTROL_EVENT = "agentloom.context.v1.ControlEvent"  # streams.admission.CONTROL_EVENT_NAME
APPLY = "apply"  # the processor will apply the original
IGNORE = "ignore"  # ... ignore it as a duplicate
REFUSE = "refuse"  # ... refuse it again


@dataclass(frozen=True)
class Replayable:
    """An original's event, or why it is not replayed (``code``, ``why``)."""

    event: ContextEvent | None
    code: str | None = None
    why: str = ""


@dataclass(frozen=True)
class Forecast:
    expect: str  # APPLY | IGNORE | REFUSE
    code: str | None  # why not applied: duplicate, refused_key, unknown_session, ...
    why: str


def replayable(key: bytes | None, value: bytes, headers: object) -> Replayable:
    """The original as the processor will first see it. Pure."""
    if envelope_of(envelope_headers(headers)) is None:
        return Replayable(None, "envelope_invalid", "the original carries no well-formed envelope")
    try:
        if codec.writer_name(value) == CONTROL_EVENT:
            why = "a control event is a service's message; only context events are replayed"
            return Replayable(None, "not_a_context_event", why)
        ev = decode_event(value)
        validate_event(ev)
    except InvalidEvent as exc:
        return Replayable(None, exc.reason_code, exc.message)
    except Exception as exc:  # hostile bytes: whatever a decoder may raise
        return Replayable(None, "undecodable", f"{type(exc).__name__}: {exc}")
    if key != ev.scope.session_id.encode():
        return Replayable(None, "key_mismatch", "the original's key is not its session id")
    return Replayable(ev)


def forecast(ev: ContextEvent, known: Known) -> Forecast:
    """What the processor will do with ``ev`` given what the database holds. Pure."""
    s = ev.scope
    if known.session is None:
        return Forecast(REFUSE, "unknown_session", f"session {s.session_id} does not exist")
    if known.session != (s.space_id, s.actor_id):
        return Forecast(REFUSE, "scope_mismatch", "the event's space or actor is not its session's")
    if known.record is not None:
        rec, seq = known.record
        why = f"{ev.event_key} is committed already, as {rec} (session sequence {seq})"
        return Forecast(IGNORE, "duplicate", why)
    if known.operation_record is not None:
        why = f"its operation {ev.operation_id} is committed already, as {known.operation_record}"
        return Forecast(IGNORE, "duplicate", why)
    if known.refusal is not None and known.refusal[0] not in NOT_BINDING:
        code, message = known.refusal
        why = f"{ev.event_key} was refused ({code}: {message}); a refused key stays refused"
        return Forecast(IGNORE, "refused_key", why)
    return Forecast(APPLY, None, f"{ev.event_key} is neither committed nor refused in its session")


def read_back(known: Known) -> tuple[str | None, str]:
    """(code, what happened) once the processor passed the replayed original: the record
    it committed, the refusal it recorded, or neither. Pure."""
    if known.record is not None:
        return None, f"applied: committed as {known.record[0]}"
    if known.operation_record is not None:
        return None, f"applied: its operation is committed as {known.operation_record}"
    if known.refusal is not None:
        return known.refusal[0], f"refused again: {known.refusal[0]}: {known.refusal[1]}"
    why = "refused before it could be attributed to its session (see the dead-letter topic)"
    return "not_applied", f"not applied: {why}"
