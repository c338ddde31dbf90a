"""Contract validation of a decoded event or control event: pure, no I/O.

Rejections carry a machine-readable ``reason_code`` that the dead-letter topic keeps.
Authority is host-assigned (R3.3): each kind has the authorities a host may give it, so
model text can never arrive as ``system`` and a tool result can never claim ``developer``.

Everything PostgreSQL or Kafka could refuse is refused here first, before any SQL, so
that one record can never fail a batch transaction (README "Limits"; the processor still
isolates whatever slips through): U+0000 anywhere, ids over their length or with control
characters, JSON nested too deep, negative or inconsistent sizes, inline content over
the inline limit (R3.4), malformed compaction outcomes.
The strings of every field, ids and free text alike, are checked by
``schemas.field_limits``.
"""

from __future__ import annotations

import hashlib
import math
import re

from schemas.contracts import (
    PAYLOAD_FOR_KIND,
    AssistantMessagePayload,
    Authority,
    ChildResultPayload,
    ConstraintPayload,
    ContextEvent,
    DecisionPayload,
    PlanPayload,
    QuestionPayload,
    RecordKind,
    RetractionPayload,
    ToolCallPayload,
)
from schemas.field_limits import MAX_LIST_ITEMS, check_strings
from schemas.json_text import parse_json
from schemas.limits import (
    MAX_ID_LEN,
    MAX_KEY_LEN,
    MAX_RUN_ID_LEN,
    id_problem,
)
from schemas.payload_rules import (
    MAX_COUNT,
    validate_assistant,
    validate_authored,
    validate_constraint,
    validate_plan,
    validate_retraction,
)
from schemas.payload_rules import count as _count
from schemas.payload_rules import fail as _fail
from schemas.summary_body import summary_body
from schemas.wire import BudgetObservation, CompactionOutcome, ControlEvent

# R3.4: inline content is at most this many UTF-8 bytes; larger content goes to the
# content store first and is referenced by hash (the SDK's INLINE_LIMIT, test-pinned).
INLINE_MAX_BYTES = 64 * 1024

_AUTHORS = frozenset({Authority.MODEL, Authority.HOST, Authority.USER})
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
    # The runtime withdraws a record on behalf of its user (an undo); a model or
    # a tool can never make history disappear.
    RecordKind.RECORD_RETRACTED: frozenset({Authority.HOST, Authority.USER}),
    # The model writes its plan through the plan tool (the host publishes it for
    # the model, as MODEL), or the host sets it; constraints are the user's, through the host.
    RecordKind.PLAN_UPDATED: frozenset({Authority.MODEL, Authority.HOST}),
    RecordKind.CONSTRAINT_SET: frozenset({Authority.USER, Authority.HOST}),
    RecordKind.CONSTRAINT_RETIRED: frozenset({Authority.USER, Authority.HOST}),
    # Authored records: the model (through its tools), the host, or the user.
    RecordKind.DECISION_RECORDED: _AUTHORS,
    RecordKind.QUESTION_OPENED: _AUTHORS,
    RecordKind.QUESTION_CLOSED: _AUTHORS,
}


# Records that belong to a run's thread need run_id and instance_id.
RUN_SCOPED = frozenset(RecordKind) - {
    RecordKind.RESOURCE_ACTIVATION,
    RecordKind.CONSTRAINT_SET,  # a session constraint may be declared between runs
    RecordKind.CONSTRAINT_RETIRED,
}

_SHA256 = re.compile(r"[0-9a-f]{64}")


# --- context events ---------------------------------------------------------------------


def validate_event(ev: ContextEvent) -> None:
    """Raise ``InvalidEvent`` when ``ev`` breaks the contract; return None otherwise."""
    if not ev.event_key or id_problem(ev.event_key, MAX_KEY_LEN) is not None:
        raise _fail(
            "bad_event_key", f"event_key must be 1..{MAX_KEY_LEN} characters, no control ones"
        )
    s = ev.scope
    if not (s.space_id and s.actor_id and s.session_id):
        raise _fail("bad_scope", "scope needs space_id, actor_id and session_id")
    if ev.kind in RUN_SCOPED and not (s.run_id and s.instance_id):
        raise _fail("bad_scope", f"{ev.kind} needs scope.run_id and scope.instance_id")
    _validate_fields(ev)
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
        validate_assistant(ev.payload)
    elif isinstance(ev.payload, ToolCallPayload):
        parse_json(ev.payload.arguments_json, "arguments", "bad_tool_arguments")
    elif isinstance(ev.payload, ChildResultPayload):
        _count("payload.source_revision", ev.payload.source_revision)
    elif isinstance(ev.payload, RetractionPayload):
        validate_retraction(ev, ev.payload)
    elif isinstance(ev.payload, PlanPayload):
        validate_plan(ev.payload)
    elif isinstance(ev.payload, ConstraintPayload):
        validate_constraint(ev, ev.payload)
    elif isinstance(ev.payload, DecisionPayload | QuestionPayload):
        validate_authored(ev, ev.payload)


def _validate_fields(ev: ContextEvent) -> None:
    """Every string storable; ids and labels short and without control characters;
    free text bounded; integers that are sizes, revisions or times non-negative."""
    check_strings(ev, False, MAX_LIST_ITEMS)
    _count("source.occurred_at_ms", ev.source.occurred_at_ms)
    if ev.expected_revision is not None:
        _count("expected_revision", ev.expected_revision)


def _validate_content(ev: ContextEvent) -> None:
    c = ev.content
    if (c.inline is None) == (c.ref is None):
        raise _fail("bad_content", "content needs exactly one of inline or ref")
    _count("content.length", c.length)
    if c.inline is not None:
        raw = c.inline.encode("utf-8", "surrogatepass")
        if len(raw) > INLINE_MAX_BYTES:
            raise _fail("inline_too_large", f"content.inline is {len(raw)} bytes, over 64 KiB")
        if hashlib.sha256(raw).hexdigest() != c.sha256:
            raise _fail("content_hash_mismatch", "content.sha256 does not match inline text")
        if len(raw) != c.length:
            raise _fail("content_length_mismatch", "content.length does not match inline text")
    elif c.ref != c.sha256 or not _SHA256.fullmatch(c.ref or ""):
        raise _fail("bad_content", "content.ref must be the blob's sha256 (64 hex digits)")


# --- control events ---------------------------------------------------------------------


def validate_control(ev: ControlEvent) -> None:
    """A control event our own services wrote (budget observation, compaction outcome):
    checked like any input, since anyone who can write to the topic can write one."""
    if not ev.event_key or id_problem(ev.event_key, MAX_KEY_LEN) is not None:
        raise _fail("bad_event_key", f"event_key must be 1..{MAX_KEY_LEN} characters")
    # No list limit here: a summary's covered ids are cumulative (Kafka bounds the size).
    check_strings(ev, True, None)
    for name, value in ev.body.__dict__.items():
        if isinstance(value, float):
            if not math.isfinite(value) or value < 0:
                raise _fail("bad_size", f"{name} = {value} is not a finite duration")
        elif isinstance(value, int):
            _count(name, value)
    if isinstance(ev.body, BudgetObservation):
        _count("body.input_budget", ev.body.input_budget, minimum=1)
    elif isinstance(ev.body, CompactionOutcome):
        _validate_outcome(ev.body)


def _validate_outcome(out: CompactionOutcome) -> None:
    for i, pair in enumerate(out.covered_ranges):
        if len(pair) != 2:
            raise _fail("bad_covered_range", f"covered_ranges[{i}] is not a (from, to) pair")
        lo, hi = pair
        if any(isinstance(x, bool) or not isinstance(x, int) for x in (lo, hi)):
            raise _fail("bad_covered_range", f"covered_ranges[{i}] holds a non-integer")
        if not 0 <= lo <= hi <= MAX_COUNT:
            raise _fail("bad_covered_range", f"covered_ranges[{i}] = ({lo}, {hi}) is malformed")
    if not out.summary_json:
        return  # an empty candidate is refused by the commit rules (R8.4), not here
    summary = parse_json(out.summary_json, "summary_json", "bad_summary")
    if out.status == "succeeded":
        summary_body(summary)  # the shape of a summary (schemas/summary_body.py)


# --- Prepare ----------------------------------------------------------------------------


def run_start_problem(run_id: object, instance_id: object) -> str | None:
    """Why a run start naming these ids would be refused (None when it would not): for
    Prepare to answer 4xx before it publishes anything."""
    for name, value, max_len in (
        ("run_id", run_id, MAX_RUN_ID_LEN),
        ("instance_id", instance_id, MAX_ID_LEN),
    ):
        if value is None:
            continue
        if not isinstance(value, str):
            return f"{name} must be a string"
        problem = id_problem(value, max_len)
        if problem is not None:
            return f"{name} {problem}"
    return None
