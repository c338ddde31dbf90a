"""Typed, bounded request fields of the Prepare API (4xx, never 5xx).

Every id, key and number a caller sends is bounded in the OpenAPI schema itself, so that
FastAPI refuses it with 422 ``invalid_request`` before any handler, database or producer
sees it; the numbers come from ``schemas.limits``, shared with the bus's validation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import BaseModel, Field, StringConstraints, model_validator

from schemas.limits import (
    ID_PATTERN,
    MAX_ID_LEN,
    MAX_INT32,
    MAX_JSON_INT,
    MAX_KEY_LEN,
    MAX_READ_LIMIT,
    MAX_RUN_ID_LEN,
    json_problem,
)

_ID_RULE = f"1..{MAX_ID_LEN} characters, no control characters"

# Body fields.
Id = Annotated[
    str, Field(min_length=1, max_length=MAX_ID_LEN, pattern=ID_PATTERN, description=_ID_RULE)
]
RunId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_RUN_ID_LEN,
        pattern=ID_PATTERN,
        description=f"1..{MAX_RUN_ID_LEN} characters (room for '<run_id>.main'), no control"
        " characters",
    ),
]
Key = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_KEY_LEN,
        pattern=ID_PATTERN,
        description=f"1..{MAX_KEY_LEN} characters, no control characters",
    ),
]
Tokens = Annotated[int, Field(ge=0, le=MAX_INT32)]

# Read-your-writes positions: partition number (a decimal string, JSON keys being
# strings) -> offset of the caller's last append there.
_Partition = Annotated[str, StringConstraints(pattern=r"^(0|[1-9][0-9]{0,8})$")]
_Offset = Annotated[int, Field(ge=0, le=MAX_JSON_INT)]
Offsets = Annotated[
    dict[_Partition, _Offset],
    Field(
        max_length=1024,
        json_schema_extra={"additionalProperties": False},
        description="partition -> offset of the caller's last append (read-your-writes);"
        " partitions are decimal strings, offsets 0..2^53-1",
    ),
]

# Path and query parameters.
PathId = Annotated[
    str, Path(min_length=1, max_length=MAX_ID_LEN, pattern=ID_PATTERN, description=_ID_RULE)
]
PathKey = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_KEY_LEN,
        pattern=ID_PATTERN,
        description=f"1..{MAX_KEY_LEN} characters, no control characters",
    ),
]
QueryId = Annotated[
    str | None,
    Query(min_length=1, max_length=MAX_ID_LEN, pattern=ID_PATTERN, description=_ID_RULE),
]
Offset = Annotated[
    int, Query(ge=0, le=MAX_INT32, description="first character to read (0..2^31-1)")
]
AppendPartition = Annotated[
    int | None,
    Query(ge=0, le=MAX_INT32, description="the partition the append was written to"),
]
AppendOffset = Annotated[
    int | None,
    Query(ge=0, le=MAX_JSON_INT, description="the offset the append was written at"),
]
Limit = Annotated[
    int,
    Query(ge=1, le=MAX_READ_LIMIT, description=f"characters to read (1..{MAX_READ_LIMIT})"),
]


class Body(BaseModel):
    """A JSON request body: besides its fields' own rules, no text anywhere in it (free
    text, keys, values of open objects like ``model_profile``) may hold what PostgreSQL
    cannot store, and nothing in it is nested beyond ``MAX_JSON_DEPTH``."""

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        problem = json_problem(data)
        if problem is not None:
            raise ValueError(problem)
        return data


def json_path(loc: Sequence[Any]) -> str:
    """``("body", "skill_bindings", 0, "name")`` -> ``skill_bindings[0].name``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "body" or out:
            out += f".{part}" if out else str(part)
    return out
