"""The main view of a session's records (R2.6, R8.1, R8.2): the main threads' records,
the part of a run's view that compacts, and its counters counted record by record."""

from __future__ import annotations

import asyncpg

from domain.compaction.triggers import Counters

# The main threads of a session's records: the part of a run's view that compacts.
MAIN_VIEW = (
    " FROM records r LEFT JOIN runs u ON u.session_id = r.session_id AND u.run_id = r.run_id"
    " WHERE r.session_id = $1"
    " AND (r.instance_id IS NULL OR r.instance_id = u.main_instance_id)"
)

# R8.1/R8.2: a main view counts a question at run start and every valid action step.
MAIN_COUNTS = (
    "SELECT count(*) FILTER (WHERE r.kind = 'run_started') AS turns,"
    " count(*) FILTER (WHERE r.kind = 'assistant_message'"
    " AND r.payload->>'purpose' = 'action') AS steps"
)


async def counted_view(
    conn: asyncpg.Connection, session_id: str, run_id: str, through: int
) -> Counters:
    """A resumed old run's counters, record by record: questions and valid action steps
    of the main threads up to its snapshot plus its own (never by adding up runs, R2.6)."""
    r = await conn.fetchrow(
        MAIN_COUNTS + MAIN_VIEW + " AND (r.session_sequence <= $2 OR r.run_id = $3)",
        session_id,
        through,
        run_id,
    )
    return Counters(int(r["turns"]), int(r["steps"]))
