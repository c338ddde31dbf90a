"""Withdrawals as compaction sees them (R11.8, R15.3): which covered records
were withdrawn while a job ran, and the epoch that changes with every withdrawal."""

from __future__ import annotations

import asyncpg

from storage.records import retraction


async def revoked_records(
    conn: asyncpg.Connection, session_id: str, ids: list[str], after: int = 0
) -> int:
    """How many of ``ids`` were withdrawn after the job's watermark ``after`` (a resource
    revoked, or a record retracted): a summary must not restate them. One at or
    before it is no conflict: the job read the record withdrawn and rebuilt from what is
    still authorized (R11.8); counting it refused every later job."""
    n = await conn.fetchval(
        "SELECT (SELECT count(*) FROM records r JOIN revoked_resources v"
        " ON v.session_id = r.session_id AND v.resource_id = r.resource_ref"
        " WHERE r.session_id=$1 AND r.record_id = ANY($2::text[])"
        " AND v.revoked_sequence > $3)"
        " + (SELECT count(*) FROM records rx WHERE rx.session_id=$1"
        f" AND rx.kind = '{retraction.RETRACTED}' AND rx.operation_id = ANY($2::text[])"
        " AND rx.session_sequence > $3)",
        session_id,
        ids,
        after,
    )
    return int(n)


async def revocation_epoch(conn: asyncpg.Connection, session_id: str) -> str:
    """Changes whenever a resource of the session is revoked or reactivated, or a record
    is retracted — as ``view_state``'s epoch does."""
    return str(
        await conn.fetchval(
            "SELECT (SELECT count(*) || ':' || coalesce(max(revoked_sequence), 0)"
            " FROM revoked_resources WHERE session_id=$1)"
            f" || ':' || {retraction.count_sql('$1')}",
            session_id,
        )
    )
