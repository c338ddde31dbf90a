"""Contract validation of a decoded event or control event: pure, no I/O.

Rejections carry a machine-readable ``reason_code`` that the dead-letter topic keeps.
Authority is host-assigned (R3.3): each kind has the authorities a host may give it, so
model text can never arrive as ``system`` and a tool result can never claim ``developer``.

Everything PostgreSQL or Kafka could refuse is refused here first, before any SQL, so
that one record can never fail a batch transaction (README "Limits"; the processor still
isolates whatever slips through): U+0000 anywhere, ids over their length or with control
characters, JSON nested too deep, negative or inconsistent sizes, inline content over
the inline limit (R3.4), malformed compaction outcomes.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import re
import typing
from typing import Any

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
from schemas.json_text import parse_json
from schemas.limits import (
    MAX_ID_LEN,
    MAX_KEY_LEN,
    MAX_RUN_ID_LEN,
    UNSTORABLE,
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
from schemas.payload_rules import within as _text
from schemas.summary_body import summary_body
from schemas.wire import BudgetObservation, CompactionOutcome, ControlEvent

# R3.4: inline content is at most this many UTF-8 bytes; larger content goes to the
# content store first and is referenced by hash (the SDK's INLINE_LIMIT, test-pinned).
INLINE_MAX_BYTES = 64 * 1024
# Free text carried in a payload: tool call arguments, a run's reason, a child's
# conclusion, outcome and unresolved items (UTF-8 bytes, each).
MAX_PAYLOAD_TEXT_BYTES = 256 * 1024
# Items of a list in an event payload (tool calls, a child's refs and items).
MAX_LIST_ITEMS = 1024

# Payload and source fields by kind of text. Free text may hold anything storable;
# everything else is a short identifier or label: at most MAX_ID_LEN characters (these
# at most MAX_KEY_LEN: they name resources or embed ids), no control characters.
FREE_TEXT = frozenset(
    {
        "inline",
        "arguments_json",
        "reason",
        "conclusion",
        "outcome",
        "unresolved_items",
        "text",  # a plan item's
        "note",
        "explanation",
        "answer",  # a closed question's
    }
)
LONG_LABELS = frozenset(
    {
        "event_key",
        "operation_id",
        "resource_id",
        "version",
        "resource_version",
        "error_code",
        "view_ref",
        "evidence_refs",
        "artifact_refs",
        "exported_context_refs",
        "constraint_id",
        "question_key",  # an event key
    }
)

# Field name -> its length limit in characters (None: free text); others MAX_ID_LEN.
_EVENT_LIMITS: dict[str, int | None] = {
    **dict.fromkeys(FREE_TEXT),
    **dict.fromkeys(LONG_LABELS, MAX_KEY_LEN),
    "event_id": 2 * MAX_KEY_LEN,  # the producer's own id: kept nowhere, only bounded
    "run_id": MAX_RUN_ID_LEN,
}
_CONTROL_LIMITS: dict[str, int | None] = {
    "reason": None,
    "summary_json": None,  # parsed and checked by _validate_outcome
    "event_key": MAX_KEY_LEN,
}
# Ids that may not be empty where they appear (a scope's; a job's).
_REQUIRED = frozenset({"space_id", "actor_id", "session_id", "run_id", "instance_id", "job_id"})
# Never part of an id: C0, DEL, C1, lone surrogates.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")

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


# --- building blocks --------------------------------------------------------------------


@functools.cache
def _string_plan(cls: Any, control: bool) -> tuple[tuple[str, str, int | None], ...]:
    """Per contract class, once: its fields that hold strings, with their limit (None:
    free text) — kind ``s`` a string, ``t`` a tuple of strings, ``d`` a nested record
    (or a union of them), ``u`` a tuple of records. Enums (fixed vocabularies) and
    numbers are left out."""
    limits = _CONTROL_LIMITS if control else _EVENT_LIMITS
    hints = typing.get_type_hints(cls)
    plan: list[tuple[str, str, int | None]] = []
    for f in dataclasses.fields(cls):
        args = [a for a in typing.get_args(hints[f.name]) if a is not type(None)]
        hint = args[0] if len(args) == 1 else hints[f.name]
        limit = limits.get(f.name, MAX_ID_LEN)
        if hint is str:
            plan.append((f.name, "s", limit))
        elif typing.get_origin(hint) is tuple:
            item = typing.get_args(hint)[0]
            if item is str:
                plan.append((f.name, "t", limit))
            elif dataclasses.is_dataclass(item):
                plan.append((f.name, "u", None))
        elif dataclasses.is_dataclass(hint) or len(args) > 1:
            plan.append((f.name, "d", None))
    return tuple(plan)


def _scan(obj: Any, control: bool, ids: list[str], text: list[str], max_items: int | None) -> None:
    """Check the lengths of a contract record's strings (a dataclass tree of bounded
    depth) and collect them — ids into ``ids``, free text into ``text`` — for the
    character checks of ``_check_characters``."""
    values = obj.__dict__
    for name, kind, limit in _string_plan(type(obj), control):  # type: ignore[arg-type]
        v = values[name]
        if v is None:
            continue
        if kind == "s":
            if limit is None:
                # At most 4 bytes per character: encode only when it might be over.
                if len(v) * 4 > MAX_PAYLOAD_TEXT_BYTES and name != "inline":
                    _text(name, v, MAX_PAYLOAD_TEXT_BYTES)
                text.append(v)
            elif len(v) > limit or (not v and name in _REQUIRED):
                _id(name, v, limit)
            else:
                ids.append(v)
        elif kind == "d":
            _scan(v, control, ids, text, max_items)
        else:
            if max_items is not None and len(v) > max_items:
                raise _fail("too_many_items", f"{name}: {len(v)} items, over {max_items}")
            for x in v:
                if kind == "u":
                    _scan(x, control, ids, text, max_items)
                elif limit is None:
                    if len(x) * 4 > MAX_PAYLOAD_TEXT_BYTES:
                        _text(name, x, MAX_PAYLOAD_TEXT_BYTES)
                    text.append(x)
                elif len(x) > limit:
                    _id(name, x, limit)
                else:
                    ids.append(x)


def _check_characters(obj: Any, control: bool, ids: list[str], text: list[str]) -> None:
    """No U+0000 or lone surrogate anywhere, no control character in an id. Hot path:
    C-speed tests over all strings at once; the per-field search only on a hit."""
    every = "".join(ids) + "".join(text)
    bad_text = "\x00" in every or (not every.isascii() and UNSTORABLE.search(every))
    joined = "".join(ids)
    if bad_text or (not joined.isprintable() and _CONTROL.search(joined)):
        for name, value, limit in _named_strings(obj, control):
            _storable(name, value)
            if limit is not None:
                _id(name, value, limit, required=False)


def _named_strings(obj: Any, control: bool) -> list[tuple[str, str, int | None]]:
    """(field name, value, limit) of every string: the slow path, for the message."""
    out: list[tuple[str, str, int | None]] = []
    for name, kind, limit in _string_plan(type(obj), control):  # type: ignore[arg-type]
        v = obj.__dict__[name]
        if v is None:
            continue
        if kind in "du":
            for item in (v,) if kind == "d" else v:
                out += _named_strings(item, control)
        else:
            out += [(name, x, limit) for x in ((v,) if kind == "s" else v)]
    return out


def _storable(where: str, value: str) -> None:
    m = UNSTORABLE.search(value)
    if m is not None:
        raise _fail(
            "unstorable_text",
            f"{where} holds U+{ord(m.group()):04X}, which PostgreSQL cannot store",
        )


def _id(where: str, value: str, max_len: int = MAX_ID_LEN, required: bool = True) -> None:
    if not value and not required:
        return
    problem = id_problem(value, max_len)
    if problem is not None:
        raise _fail("bad_id", f"{where} {problem}")


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
    ids: list[str] = []
    text: list[str] = []
    _scan(ev, False, ids, text, MAX_LIST_ITEMS)
    _check_characters(ev, False, ids, text)
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
    ids: list[str] = []
    text: list[str] = []
    _scan(ev, True, ids, text, None)
    _check_characters(ev, True, ids, text)
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
