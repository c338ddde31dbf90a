"""What a renderer reads and holds: one stored record as a view, the skill facts it tracks,
an open tool group, the records in view. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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


@dataclass
class OpenGroup:
    assistant: RecordView
    calls: list[dict[str, Any]]
    results: dict[str, RecordView] = field(default_factory=dict)
    deferred: list[RecordView] = field(default_factory=list)
    inherited: bool = False
    # the group's call ids, built once: every record routed while it is open is looked
    # up here (a cold render routes every record of the thread).
    ids: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.ids = frozenset(c["call_id"] for c in self.calls)

    def complete(self) -> bool:
        # results only ever holds ids of this group, so all answered == as many as ids
        return len(self.results) == len(self.ids)


class DeferredRecords:
    """Records in feed order, of which the oldest may come from a loaded state: built by
    ``load`` on the first read, since a prepare rarely reads them."""

    def __init__(self, items: list[RecordView] | None = None) -> None:
        self._items = items if items is not None else []
        self._load: Callable[[], list[RecordView]] | None = None

    def defer(self, load: Callable[[], list[RecordView]]) -> None:
        self._items, self._load = [], load

    @property
    def deferred(self) -> bool:
        return self._load is not None

    def append(self, rec: RecordView) -> None:
        self._items.append(rec)

    def all(self) -> list[RecordView]:
        if self._load is not None:
            self._items[:0] = self._load()  # older than any fed since
            self._load = None
        return self._items
