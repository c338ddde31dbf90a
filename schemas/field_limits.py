"""The strings of a contract record, checked field by field: pure, no I/O.

Every string a decoded event or control event holds is walked once per record (the
fields of each contract class are found once, by their type hints): free text is bounded
in UTF-8 bytes, an id or a label in characters, and none may hold what PostgreSQL cannot
store (U+0000, a lone surrogate) or, in an id, a control character. A failure raises
``InvalidEvent`` with a machine-readable code (``schemas.payload_rules.fail``).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from typing import Any

from schemas.limits import MAX_ID_LEN, MAX_KEY_LEN, MAX_RUN_ID_LEN, UNSTORABLE, id_problem
from schemas.payload_rules import fail as _fail
from schemas.payload_rules import within as _text

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
    "summary_json": None,  # parsed and checked by schemas.validation
    "event_key": MAX_KEY_LEN,
}
# Ids that may not be empty where they appear (a scope's; a job's).
_REQUIRED = frozenset({"space_id", "actor_id", "session_id", "run_id", "instance_id", "job_id"})
# Never part of an id: C0, DEL, C1, lone surrogates.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def check_strings(obj: Any, control: bool, max_items: int | None) -> None:
    """Check every string of ``obj`` (an event when ``control`` is false, a control event
    when it is true): lengths while walking, then the characters of all at once. Lists
    hold at most ``max_items`` items (None: unbounded)."""
    ids: list[str] = []
    text: list[str] = []
    _scan(obj, control, ids, text, max_items)
    _check_characters(obj, control, ids, text)


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
