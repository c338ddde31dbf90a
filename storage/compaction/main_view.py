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

_ACTION_STEP = "r.kind = 'assistant_message' AND r.payload->>'purpose' = 'action'"

# What a view counts after an observer's watermark $4 for run $5 (records the view got
# after a prepare saw it: a trigger check subtracts them, R7.2/R7.3, R8.4): of a main
# view ($2 = 'main') the main threads' records through the run's snapshot and the run's
# own; of a child thread ($2, its instance id, R13.1) its own records, its questions
# being its inputs. A range scan of the view's tail; no row read when $4 is NULL. $1 is
# the session. Written to be joined LATERAL (``storage.compaction.state``).
LATER_COUNTS = (
    "SELECT count(*) FILTER (WHERE k.turn) AS turns, count(*) FILTER (WHERE k.step) AS steps"
    f" FROM (SELECT r.kind = 'run_started' AS turn, {_ACTION_STEP} AS step{MAIN_VIEW}"
    " AND $2 = 'main' AND r.session_sequence > $4::bigint"
    " AND (r.run_id = $5 OR r.session_sequence <= coalesce((SELECT x.through_session_sequence"
    "   FROM runs v JOIN history_snapshots x USING (snapshot_id)"
    "   WHERE v.session_id = $1 AND v.run_id = $5), 0))"
    f" UNION ALL SELECT r.kind = 'user_input', {_ACTION_STEP} FROM records r"
    " WHERE $2 <> 'main' AND r.session_id = $1 AND r.run_id = $5 AND r.instance_id = $2"
    " AND r.session_sequence > $4::bigint) k"
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
