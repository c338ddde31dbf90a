"""The agent's last prepared context of a thread, read by the compaction service: a
summarizer of the agent's own model continues that request, so it reads the covered
history from the provider's prompt cache (domain/summarizer/fork.py, issue 39 item 3).

Read-only, apart from storage/calls/prepared_contexts.py (which writes the rows, with
their purpose and lineage: migration 026), so the compaction login is granted SELECT
only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import asyncpg

from storage.calls.prepared_body import BODY


@dataclass(frozen=True)
class LastAction:
    """A thread's newest action context (its stored body) and its session's space."""

    body: bytes
    space_id: str


class AgentContexts(Protocol):
    """Port (the compaction service): a thread's newest action context."""

    async def last_action(
        self, session_id: str, run_id: str, instance_id: str
    ) -> LastAction | None:
        """The newest action context of the thread ``instance_id`` of ``run_id`` belongs
        to (the session's main thread across its runs, or that child instance), or None."""


class PgAgentContexts:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def last_action(
        self, session_id: str, run_id: str, instance_id: str
    ) -> LastAction | None:
        # One query, on the partial index (session_id, lineage, created_at DESC).
        row = await self.pool.fetchrow(
            f"SELECT {BODY} AS body, s.space_id FROM prepared_contexts p"
            " JOIN sessions s ON s.session_id = p.session_id"
            " WHERE p.session_id=$1 AND p.purpose='action' AND p.lineage = CASE WHEN EXISTS"
            " (SELECT 1 FROM runs r WHERE r.session_id=$1 AND r.run_id=$2"
            " AND r.main_instance_id=$3) THEN 'main' ELSE $3 END"
            " ORDER BY p.created_at DESC LIMIT 1",
            session_id,
            run_id,
            instance_id,
        )
        if row is None or row["body"] is None:
            return None
        return LastAction(bytes(row["body"]), str(row["space_id"]))
