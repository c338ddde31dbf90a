"""What a renderer reads: one stored record as a view, and the skill facts it tracks. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]
CountFn = Callable[[str], int]


@dataclass(frozen=True)
class RecordView:
    record_id: str
    session_sequence: int
    run_id: str | None
    instance_id: str | None
    kind: str
    authority: str
    text: str
    payload: dict[str, Any]
    token_count: int
    # Set only when ``text`` holds a prefix of content in the blob store: the whole
    # content's length in bytes (the view says so). -1: ``text`` is the whole content.
    content_length: int = -1
    content_sha256: str | None = None

    @property
    def full_length(self) -> int:
        return self.content_length if self.content_length >= 0 else len(self.text)


@dataclass
class SkillLoad:
    """A tool result that says it loaded a skill — a claim, until the assembler matches it
    against the release binding and the host's activation (R12.2)."""

    record_id: str
    name: str
    revision: str
    content_sha256: str
    text: str
    tokens: int
    message_index: int | None  # the tool message showing it, while not summarized


@dataclass(frozen=True)
class SkillActivation:
    name: str
    version: str
    content_hash: str
    authority: str
    active: bool
    record_id: str
