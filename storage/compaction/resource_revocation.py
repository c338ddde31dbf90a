"""A resource's activation and revocation (R11.8, R15.3): revoking withdraws its content
from every view and invalidates the summaries that cover a record derived from it; each
lineage falls back to its newest summary still valid. Written by the session processor in
its batch transaction, with the records (``storage.processor_store``); the views read the
withdrawals through ``storage.compaction.withdrawals``."""

from __future__ import annotations

import asyncpg

from storage.compaction.summaries import current_summary, summary_baseline


async def set_resource_state(
    conn: asyncpg.Connection, session_id: str, resource_id: str, active: bool, sequence: int
) -> list[str]:
    """R11.8/R15.3: revoking a resource withdraws its content from views and invalidates
    every summary that covers a record derived from it (descendants included: covered
    sets are cumulative). Each lineage falls back to its newest still-valid summary and
    that summary's baseline. Returns the invalidated summary ids."""
    if active:
        await conn.execute(
            "DELETE FROM revoked_resources WHERE session_id=$1 AND resource_id=$2",
            session_id,
            resource_id,
        )
        return []
    await conn.execute(
        "INSERT INTO revoked_resources (session_id, resource_id, revoked_sequence)"
        " VALUES ($1,$2,$3) ON CONFLICT DO NOTHING",
        session_id,
        resource_id,
        sequence,
    )
    rows = await conn.fetch(
        "UPDATE summary_revisions s SET status = 'invalidated' WHERE s.session_id=$1"
        " AND s.status = 'committed' AND EXISTS (SELECT 1 FROM records r"
        "  WHERE r.session_id = $1 AND r.resource_ref = $2"
        "  AND r.record_id = ANY(s.covered_record_ids)) RETURNING s.summary_id",
        session_id,
        resource_id,
    )
    if not rows:
        return []
    for st in await conn.fetch(
        "SELECT lineage, current_summary_id FROM compaction_state WHERE session_id=$1 FOR UPDATE",
        session_id,
    ):
        sid = st["current_summary_id"]
        while sid is not None:
            s = await current_summary(conn, sid)
            if s is None or s["status"] == "committed":
                break
            sid = s["parent_summary_id"]
        valid = await current_summary(conn, sid) if sid else None
        base = summary_baseline(valid)
        await conn.execute(
            "UPDATE compaction_state SET current_summary_id=$3, baseline_user_turns=$4,"
            " baseline_model_steps=$5, last_attempt=NULL, updated_at=now()"
            " WHERE session_id=$1 AND lineage=$2",
            session_id,
            st["lineage"],
            sid,
            base.user_turns,
            base.model_steps,
        )
    return [r["summary_id"] for r in rows]
