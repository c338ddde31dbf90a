"""A compaction outcome's summary (``CompactionOutcome.summary_json``), typed: what the
compaction service writes, what admission checks and what the processor commits as a
summary revision (R11.6, R15.1). One declaration, one writer (``SummaryBody.to_json``)
and one parser (``parse_summary``); on the wire it stays a JSON string of the Avro record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from schemas.errors import InvalidEvent
from schemas.json_text import parse_json


@dataclass(frozen=True)
class RollupNote:
    """What a job did to bring its summary within the bound (R11.2, R11.8): the covered
    history summarized again from its records (``rederived``: the parent's records read
    again), the entries rolled up by the summarizer (``requests``), and the entries the
    final fit dropped (``fitted_out``). A field the job did not reach stays None and is
    not written; ``error`` is written whenever the job made calls (None: none failed)."""

    calls: int | None = None
    rederived: int | None = None
    requests: int | None = None
    entries_in: int | None = None
    entries_out: int | None = None
    fitted_out: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, int | str | None]:
        out: dict[str, int | str | None] = {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }
        if self.calls is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class SummaryBody:
    """The summary a job proposes: its draft (a JSON object, as ``SummaryDraft.to_dict``
    writes it), its rendered text, what it kept verbatim on purpose (R11.7), its bound
    (R11.2), how it was bounded, and what the text rules framed or marked (R11.4)."""

    draft: Mapping[str, Any]
    text: str
    retained_reference_ids: tuple[str, ...] = ()
    bound_tokens: int | None = None
    rollup: RollupNote | None = None
    text_rules: tuple[Mapping[str, Any], ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            {
                "draft": self.draft,
                "text": self.text,
                "retained_reference_ids": list(self.retained_reference_ids),
                "bound_tokens": self.bound_tokens,
                "rollup": None if self.rollup is None else self.rollup.to_json(),
                "text_rules": list(self.text_rules),
            }
        )


def _bad(message: str) -> InvalidEvent:
    return InvalidEvent(f"summary_json: {message}", reason_code="bad_summary")


def _count(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"{name} is not an integer")
    return value


def _rollup(value: object) -> RollupNote | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad("rollup is not an object")
    error = value.get("error")
    if error is not None and not isinstance(error, str):
        raise _bad("rollup.error is not a string")
    counts = {
        f.name: _count(value.get(f.name), f"rollup.{f.name}")
        for f in fields(RollupNote)
        if f.name != "error"
    }
    return RollupNote(error=error, **counts)


def summary_body(value: object) -> SummaryBody:
    """The typed summary of a parsed ``summary_json``; ``bad_summary`` when its shape is
    not one (a draft object and a text are required; the rest may be absent)."""
    if not (
        isinstance(value, dict)
        and isinstance(value.get("draft"), dict)
        and isinstance(value.get("text"), str)
    ):
        raise _bad("needs an object with draft and text")
    retained = value.get("retained_reference_ids") or []
    rules = value.get("text_rules") or []
    if not (isinstance(retained, list) and all(isinstance(i, str) for i in retained)):
        raise _bad("retained_reference_ids is not a list of ids")
    if not (isinstance(rules, list) and all(isinstance(r, dict) for r in rules)):
        raise _bad("text_rules is not a list of objects")
    return SummaryBody(
        value["draft"],
        value["text"],
        tuple(retained),
        _count(value.get("bound_tokens"), "bound_tokens"),
        _rollup(value.get("rollup")),
        tuple(rules),
    )


def parse_summary(text: str) -> SummaryBody:
    """The one parser of ``summary_json``: hostile JSON refused first (``parse_json``:
    depth, unstorable text), then the shape (``summary_body``)."""
    return summary_body(parse_json(text, "summary_json", "bad_summary"))
