"""The JSON of a large typed answer, written by orjson without a generic walk.

A PreparedContext or a checked model call carries the prompt (messages, tools, the
provider request): free-form values as large as the context. FastAPI's pydantic
serialization walks and copies every one of them (about three times the assembly's
cost on a 10k-message context); here orjson writes the plain values natively and only
the answer's own models go through ``fields_of``. The JSON is what ``model_dump``
would give with ``exclude_unset``: an answer's model leaves out the fields its use case
did not set, as the dicts it replaced did.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import JSONResponse
from pydantic import BaseModel


def fields_of(value: object) -> dict[str, object]:
    """A model's set fields in declaration order, then its extra fields (orjson's
    ``default``: called for a value orjson does not write itself); a field whose JSON
    the model already holds (``json_fragments``) is written as those bytes."""
    if not isinstance(value, BaseModel):
        raise TypeError(f"{type(value).__name__} is not JSON serializable")
    given = value.model_fields_set
    out = {k: getattr(value, k) for k in type(value).model_fields if k in given}
    extra = value.__pydantic_extra__
    if extra:
        out.update(extra)
    written = getattr(value, "json_fragments", None)
    if written is not None:
        for k, raw in written().items():
            out[k] = orjson.Fragment(raw)
    return out


class AnswerResponse(JSONResponse):
    """A JSON response written by orjson, whose content may be a typed answer
    (``fields_of``)."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(
            content,
            default=fields_of,
            option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY,
        )
