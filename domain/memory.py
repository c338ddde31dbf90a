"""Long-term memory as a port only (R12.5; seed §7).

Long-term memory keeps reusable facts or preferences across runs, each with a source, a
scope, an expiry and rules for conflicts, deletion and withdrawal. The seed leaves the
MemoryService to a later design and is explicit about what must *not* happen: the chat
summary, retrieval results and checkpoints are never written to long-term memory on
their own, and memory never replaces the raw interaction history (that is the record
store's job). So this module defines the two ports and nothing that implements them:

- ``MemoryReader``: the runtime hands Prepare the memory items the caller is authorized
  to see; they enter the context as reference material (``as_material``), counted in the
  budget like retrieved passages and never promoted to instructions.
- ``MemoryWriter``: an explicit write with its source. Nothing in this codebase calls it;
  ``tests/unit/test_memory_port.py`` fails if any product module does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from domain.context.assemble import Material


@dataclass(frozen=True)
class MemoryItem:
    """One authorized long-term memory item, as the runtime's MemoryService returns it."""

    memory_id: str
    version: str
    scope: str  # whose memory: e.g. "tenant/<t>/user/<u>" (the MemoryService's scheme)
    text: str
    source: str  # where it was written from (an explicit, named writer)
    expires_at: datetime | None = None


class MemoryReader(Protocol):
    async def authorized_items(self, scope: str, query: str) -> Sequence[MemoryItem]:
        """The items ``scope`` may see that are relevant to ``query``, unexpired."""
        ...


class MemoryWriter(Protocol):
    async def write(self, item: MemoryItem, *, written_by: str) -> None:
        """An explicit write; ``written_by`` names the actor. Never called automatically."""
        ...


def as_material(items: Sequence[MemoryItem], now: datetime) -> list[Material]:
    """Memory enters the context as reference material with its citation (R12.4/R12.5):
    expired items are left out, duplicates by id keep the newest version."""
    newest: dict[str, MemoryItem] = {}
    for item in items:
        if item.expires_at is not None and item.expires_at <= now:
            continue
        kept = newest.get(item.memory_id)
        if kept is None or item.version > kept.version:
            newest[item.memory_id] = item
    return [
        Material(
            citation_id=f"memory:{item.memory_id}",
            version=item.version,
            text=item.text,
            source=item.source,
            origin="memory",
        )
        for item in newest.values()
    ]
