"""Contract validation of a decoded event: pure, no I/O.

Rejections carry a machine-readable ``reason_code`` that the dead-letter topic keeps.
Authority is host-assigned (R3.3): each kind has the authorities a host may give it, so
model text can never arrive as ``system`` and a tool result can never claim ``developer``.
"""

from __future__ import annotations

import hashlib
import json

from schemas.contracts import (
    PAYLOAD_FOR_KIND,
    AssistantMessagePayload,
    Authority,
    ContextEvent,
    RecordKind,
)
from schemas.errors import InvalidEvent

MAX_KEY_LEN = 512

ALLOWED_AUTHORITY: dict[RecordKind, frozenset[Authority]] = {
    RecordKind.USER_INPUT: frozenset({Authority.USER}),
    RecordKind.SUPPLEMENT: frozenset({Authority.USER}),
    RecordKind.ASSISTANT_MESSAGE: frozenset({Authority.MODEL}),
    RecordKind.TOOL_CALL: frozenset({Authority.MODEL, Authority.HOST}),
    RecordKind.TOOL_OUTCOME: frozenset({Authority.TOOL, Authority.HOST}),
    RecordKind.RESOURCE_ACTIVATION: frozenset({Authority.HOST, Authority.SYSTEM}),
    RecordKind.CHILD_RESULT: frozenset({Authority.HOST}),
    RecordKind.RUN_STARTED: frozenset({Authority.HOST}),
    RecordKind.RUN_RESUMED: frozenset({Authority.HOST}),
    RecordKind.RUN_CANCELLED: frozenset({Authority.HOST, Authority.USER}),
    RecordKind.RUN_FINISHED: frozenset({Authority.HOST}),
}

# Records that belong to a run's thread need run_id and instance_id.
RUN_SCOPED = frozenset(RecordKind) - {RecordKind.RESOURCE_ACTIVATION}


def _fail(code: str, message: str) -> InvalidEvent:
    return InvalidEvent(message, reason_code=code)


def validate_event(ev: ContextEvent) -> None:
    """Raise ``InvalidEvent`` when ``ev`` breaks the contract; return None otherwise."""
    if not ev.event_key or len(ev.event_key) > MAX_KEY_LEN:
        raise _fail("bad_event_key", "event_key must be 1..512 characters")
    s = ev.scope
    if not (s.space_id and s.actor_id and s.session_id):
        raise _fail("bad_scope", "scope needs space_id, actor_id and session_id")
    if ev.kind in RUN_SCOPED and not (s.run_id and s.instance_id):
        raise _fail("bad_scope", f"{ev.kind} needs scope.run_id and scope.instance_id")
    expected = PAYLOAD_FOR_KIND[ev.kind]
    if not isinstance(ev.payload, expected):
        raise _fail(
            "payload_kind_mismatch",
            f"{ev.kind} carries {expected.__name__}, got {type(ev.payload).__name__}",
        )
    if ev.authority not in ALLOWED_AUTHORITY[ev.kind]:
        raise _fail("authority_not_allowed", f"{ev.kind} cannot carry authority {ev.authority}")
    _validate_content(ev)
    if isinstance(ev.payload, AssistantMessagePayload):
        _validate_assistant(ev.payload)


def _validate_content(ev: ContextEvent) -> None:
    c = ev.content
    if (c.inline is None) == (c.ref is None):
        raise _fail("bad_content", "content needs exactly one of inline or ref")
    if c.inline is not None:
        raw = c.inline.encode("utf-8")
        if hashlib.sha256(raw).hexdigest() != c.sha256:
            raise _fail("content_hash_mismatch", "content.sha256 does not match inline text")
        if len(raw) != c.length:
            raise _fail("content_length_mismatch", "content.length does not match inline text")
    elif c.ref != c.sha256:
        raise _fail("bad_content", "content.ref must be the blob's sha256")


def _validate_assistant(p: AssistantMessagePayload) -> None:
    if p.purpose not in ("action", "compaction", "completion", "verification"):
        raise _fail("bad_purpose", f"unknown purpose {p.purpose!r}")
    seen: set[str] = set()
    for call in p.tool_calls:
        if not call.call_id or call.call_id in seen:
            raise _fail("bad_tool_call", f"tool call id {call.call_id!r} empty or repeated")
        seen.add(call.call_id)
        try:
            json.loads(call.arguments_json)
        except ValueError as exc:
            raise _fail("bad_tool_arguments", f"arguments of {call.call_id} are not JSON") from exc
