"""What the inspector shows of a session's compaction (R15.3, R18): its jobs — status,
stage, reason (a deferral names a call in flight: ``open_call_in_flight:<call id>``) and
what the text rules framed or marked in each committed summary — and its tool calls that
never got a result, with whether compaction already treats them as answered ``unknown``
(the agent moved past them: ``domain.context.selection``). Used by the web console's
session page and ``agentloom session inspect``. Read only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
from pydantic import JsonValue

from storage.records.retraction import live_sql

JOBS_SHOWN = 20


@dataclass(frozen=True)
class OpenCall:
    """A tool call without a result. ``state``: ``in_flight`` while the agent may still be
    waiting for it; ``unknown`` once it moved past (a later model step, its run's end, or
    a later run) — compaction then covers its group whole, the outcome unknown."""

    call_id: str
    tool: str
    record_id: str
    run_id: str | None
    session_sequence: int
    state: str

    def to_dict(self) -> dict[str, JsonValue]:
        """As ``agentloom session inspect --json`` prints it: the fields as they are."""
        return asdict(self)


@dataclass(frozen=True)
class JobLine:
    job_id: str
    status: str
    stage: str | None
    reason: str | None
    trigger_reasons: list[str]
    created_at: datetime
    text_rules: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, JsonValue]:
        """As ``agentloom session inspect --json`` prints it: the fields as they are,
        ``created_at`` in ISO 8601."""
        return asdict(self) | {"created_at": self.created_at.isoformat()}


_CALLS = f"""
WITH calls AS (
    SELECT r.record_id, r.run_id, r.session_sequence, c->>'call_id' AS call_id,
           c->>'name' AS tool
      FROM records r, jsonb_array_elements(CASE jsonb_typeof(r.payload->'tool_calls')
                WHEN 'array' THEN r.payload->'tool_calls' ELSE '[]' END) c
     WHERE r.session_id = $1 AND r.kind = 'assistant_message' AND {live_sql("r")}
    UNION ALL
    SELECT r.record_id, r.run_id, r.session_sequence, r.payload->>'call_id',
           r.payload->>'name'
      FROM records r
     WHERE r.session_id = $1 AND r.kind = 'tool_call' AND {live_sql("r")}
)
SELECT c.*, EXISTS (
    SELECT 1 FROM records l
     WHERE l.session_id = $1 AND l.session_sequence > c.session_sequence
       AND (l.kind = 'assistant_message' OR l.run_id IS DISTINCT FROM c.run_id
            OR l.kind IN ('run_finished', 'run_cancelled'))
) AS moved_on
  FROM calls c
 WHERE NOT EXISTS (
    SELECT 1 FROM records o
     WHERE o.session_id = $1 AND o.kind = 'tool_outcome'
       AND o.payload->>'call_id' = c.call_id AND {live_sql("o")})
 ORDER BY c.session_sequence
"""


async def open_calls(pool: asyncpg.Pool, session_id: str) -> list[OpenCall]:
    rows = await pool.fetch(_CALLS, session_id)
    return [
        OpenCall(
            r["call_id"] or "",
            r["tool"] or "",
            r["record_id"],
            r["run_id"],
            r["session_sequence"],
            "unknown" if r["moved_on"] else "in_flight",
        )
        for r in rows
    ]


async def recent_jobs(pool: asyncpg.Pool, session_id: str) -> list[JobLine]:
    """The session's latest compaction jobs, newest first, with each committed summary's
    text-rule decisions."""
    rows = await pool.fetch(
        "SELECT j.job_id, j.status, j.stage, j.reason, j.created_at,"
        " j.request->'trigger_reasons' AS triggers, s.text_rules"
        " FROM compaction_jobs j LEFT JOIN summary_revisions s ON s.job_id = j.job_id"
        " WHERE j.session_id=$1 ORDER BY j.created_at DESC LIMIT $2",
        session_id,
        JOBS_SHOWN,
    )
    return [
        JobLine(
            r["job_id"],
            r["status"],
            r["stage"],
            r["reason"],
            [str(t) for t in (r["triggers"] or [])],
            r["created_at"],
            list(r["text_rules"] or []),
        )
        for r in rows
    ]
