"""Hostile JSON text, checked before and after parsing: nesting depth measured on the
text (no recursion), and values that PostgreSQL's jsonb cannot store (R15.4)."""

from __future__ import annotations

import json
import re
from typing import Any

from schemas.errors import InvalidEvent
from schemas.limits import MAX_JSON_DEPTH, json_problem

# A JSON string literal (unrolled loop: linear, no catastrophic backtracking).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def _fail(code: str, message: str) -> InvalidEvent:
    return InvalidEvent(message, reason_code=code)


def json_depth(text: str) -> int:
    """Deepest ``[``/``{`` nesting of JSON text, measured on the text — without parsing,
    so without recursion (``json.loads`` recurses per level and raises RecursionError on
    100,000 levels). String literals are removed first; unbalanced text gets some
    depth, and the parser rejects it afterwards."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_JSON_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def parse_json(text: str, what: str, bad_code: str) -> Any:
    """``json.loads`` made safe for hostile text: depth is checked first
    (``nesting_too_deep``), and the value must be storable as jsonb (no U+0000 or lone
    surrogate, escaped or not: ``unstorable_text``); not JSON is ``bad_code``."""
    # Fast paths (str.count and `in` are C loops): too few brackets to nest too deep; no
    # \u escape, so no U+0000 or lone surrogate can appear in the parsed value.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        depth = json_depth(text)
        if depth > MAX_JSON_DEPTH:
            raise _fail(
                "nesting_too_deep", f"{what}: JSON nested {depth} deep, over {MAX_JSON_DEPTH}"
            )
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _fail(bad_code, f"{what} is not JSON: {exc}") from exc
    problem = json_problem(value) if "\\u" in text else None
    if problem is not None:
        code = "nesting_too_deep" if "nested" in problem else "unstorable_text"
        raise _fail(code, f"{what}: {problem}")
    return value
