"""The processor's writes and scans of ``compaction_state`` beyond lock/update
(``storage.compaction``): the view-token estimate, an observation already checked and the
sessions due a pre-emptive check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from domain.compaction.preemption import PreemptCandidate
from domain.compaction.triggers import REBUILD_DUE
from domain.policy.parsed import policy_of


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


async def checked(conn: asyncpg.Connection, session_id: str, event_key: str) -> Checked | None:
    r = await conn.fetchrow(
        "SELECT t.job_id, j.status, j.request FROM trigger_reports t"
        " LEFT JOIN compaction_jobs j ON j.job_id = t.job_id"
        " WHERE t.session_id=$1 AND t.event_key=$2",
        session_id,
        event_key,
    )
    return None if r is None else Checked(r["job_id"], r["status"], r["request"])


async def preempt_candidates(
    conn: asyncpg.Connection, session_ids: list[str]
) -> list[PreemptCandidate]:
    rows = await conn.fetch(
        "SELECT c.session_id, s.active_run_id, r.context_policy,"
        " r.policy_revision AS release_policy, c.fixed_overhead, c.view_tokens,"
        " c.input_budget, c.required_tokens FROM compaction_state c"
        " JOIN sessions s USING (session_id) JOIN releases r USING (release_id)"
        " WHERE c.session_id = ANY($1::text[]) AND c.lineage = 'main'"
        " AND c.input_budget > 0 AND c.active_job_id IS NULL AND (c.last_attempt IS NULL"
        f" OR c.last_attempt->>'rebuild' = '{REBUILD_DUE}')"
        " AND s.active_run_id IS NOT NULL",
        session_ids,
    )
    return [
        PreemptCandidate(
            r["session_id"],
            r["active_run_id"],
            policy_of(r["release_policy"], r["context_policy"]),
            r["release_policy"],
            int(r["fixed_overhead"]),
            int(r["view_tokens"]),
            int(r["input_budget"]),
            int(r["required_tokens"]),
        )
        for r in rows
    ]
