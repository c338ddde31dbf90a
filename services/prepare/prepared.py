"""Prepared contexts held for the gateway's final check (R10.5)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from domain.assemble import Assembled
from domain.budget import ModelProfile


@dataclass
class PreparedEntry:
    """A prepared context held for the gateway's final check (R10.5). Held in memory: a
    call for one this process no longer holds gets ``prepared_not_found`` — prepare again."""

    prepared_id: str
    session_id: str
    run_id: str
    instance_id: str
    purpose: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    built: Assembled
    profile: ModelProfile
    soft_ratio: float | None
    reprepare_of: str | None
    dependency_versions: dict[str, Any]


class PreparedStore:
    """The latest ``capacity`` prepared contexts: each holds its message list (pointers to
    shared message dicts), so the store is bounded."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, PreparedEntry] = OrderedDict()

    def remember(self, entry: PreparedEntry) -> None:
        self._entries[entry.prepared_id] = entry
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def get(self, prepared_id: str) -> PreparedEntry | None:
        return self._entries.get(prepared_id)
