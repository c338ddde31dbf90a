"""Bounded path and query values of the console (4xx, never 5xx).

Ids keep Prepare's rule (``schemas.limits``) and are one path segment: no ``/`` or
``\\``, never ``.`` or ``..``. The console puts them in Prepare's URLs (quoted as well,
``prepare_client``), where ``release=../../healthz`` once read Prepare's health check as
a release (a 500); now it is a 422 ``invalid_request``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import AfterValidator

from schemas import limits
from schemas.limits import ID_PATTERN, MAX_ID_LEN, MAX_INT32

_RULE = f"1..{MAX_ID_LEN} characters, no control character, '/' or '\\', not '.' or '..'"
# ID_PATTERN without the separators.
SEGMENT_PATTERN = ID_PATTERN.replace("]", "/\\\\]", 1)


def _segment(value: str) -> str:
    if "/" in value or "\\" in value:
        raise ValueError("an id has no '/' or '\\'")
    if value and value.strip(".") == "":
        raise ValueError("an id is not '.' or '..'")
    return value


PathId = Annotated[
    str,
    Path(min_length=1, max_length=MAX_ID_LEN, pattern=SEGMENT_PATTERN, description=_RULE),
    AfterValidator(_segment),
]
# The settings form sends every field, empty ones included: empty is "none".
FormId = Annotated[
    str,
    Query(max_length=MAX_ID_LEN, pattern=SEGMENT_PATTERN.replace("]+", "]*"), description=_RULE),
    AfterValidator(_segment),
]
Offset = Annotated[int, Query(ge=0, le=MAX_INT32, description="first character (0..2^31-1)")]


def id_problem(value: str) -> str | None:
    """Why a form value cannot be an id (None when it can, or is empty)."""
    if not value:
        return None
    if (problem := limits.id_problem(value)) is not None:
        return problem
    try:
        _segment(value)
    except ValueError as exc:
        return str(exc)
    return None


# Documented on every console route, beside what Prepare's ApiRoute documents.
RESPONSES: dict[int | str, dict[str, Any]] = {
    303: {"description": "sign in first: a redirect to /login (or the page after sign-in)"},
    403: {"description": "csrf_refused, origin_refused, or not_granted (a refusal page)"},
    404: {"description": "not_found: unknown, or of another tenant space"},
}
