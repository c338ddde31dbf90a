"""The processor's writes and scans of ``compaction_state`` beyond lock/update
(``storage.compaction.summaries``): the view-token estimate, an observation already checked and the
sessions due a pre-emptive check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg


async def replace_view_tokens(
    conn: asyncpg.Connection, session_id: str, lineage: str, covered: int, summary: int
) -> None:
    """A committed summary replaces ``covered`` tokens of the view by ``summary`` tokens."""
    await conn.execute(
        "UPDATE compaction_state SET view_tokens = view_tokens - $3 + $4"
        " WHERE session_id=$1 AND lineage=$2",
        session_id,
        lineage,
        covered,
        summary,
    )


@dataclass(frozen=True)
class Checked:
    """An observation already checked (its trigger report) and the job it started."""

    job_id: str | None
    job_status: str | None
    job_request: dict[str, Any] | None
