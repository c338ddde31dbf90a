"""The configuration of a record that the domain builds and an answer publishes as it is
(issue 40: one declaration per concept).

Such a record is a frozen stdlib dataclass declared in ``schemas/answers`` — the bottom
layer, so the domain imports it — and the answer's pydantic model takes it as a field
type: pydantic validates and serializes a stdlib dataclass, and reads its
``__pydantic_config__`` (``record_config``) for the published schema. An answer always
writes every field of such a record (a dataclass has no unset fields), so the schema
requires each and names no default: the defaults are the domain's, not the wire's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict
from pydantic.config import JsonDict


def _every_field_written(schema: JsonDict) -> None:
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for prop in properties.values():
            if isinstance(prop, dict):
                prop.pop("default", None)


def record_config(extra: Literal["forbid", "allow"]) -> ConfigDict:
    """A published record's pydantic configuration: ``extra`` as its answer declares it,
    every field required in the answer's schema."""
    return ConfigDict(
        extra=extra,
        json_schema_serialization_defaults_required=True,
        json_schema_extra=_every_field_written,
    )
