"""A long session's reads on the prepare path stay index reads (issue 37): a chat session
that has answered thousands of questions has thousands of runs, and every prepare and
every trigger check asks whether a run started after this one's snapshot (R2.6,
``storage.compaction.view_state``). With only the runs' (session, run) key that question
read every run of the session; ``runs_started`` (migration 028) answers it from an index
range. Checked on the real statement, with the planner's real statistics."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest

from storage.compaction import view_state
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration

EARLIER_RUNS = 3000


class _Captured:
    """Stands in for a connection: keeps the statement ``_main_row`` sends."""

    def __init__(self) -> None:
        self.sql = ""
        self.args: tuple[Any, ...] = ()

    async def fetchrow(self, sql: str, *args: Any) -> None:
        self.sql, self.args = sql, args


async def _run_row(db: asyncpg.Pool, session_id: str, run_id: str) -> asyncpg.Record:
    for _ in range(200):
        row = await db.fetchrow(
            "SELECT snapshot_id, started_sequence FROM runs WHERE session_id=$1 AND run_id=$2",
            session_id,
            run_id,
        )
        if row is not None:
            return row
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} was never committed")


def _scans(plan: Any) -> list[tuple[str, str]]:
    """(node type, index or relation) of every scan in an EXPLAIN (FORMAT JSON) plan."""
    found: list[tuple[str, str]] = []
    if isinstance(plan, dict):
        if "Scan" in str(plan.get("Node Type", "")):
            found.append((plan["Node Type"], plan.get("Index Name") or plan.get("Relation Name")))
        for v in plan.values():
            found.extend(_scans(v))
    elif isinstance(plan, list):
        for v in plan:
            found.extend(_scans(v))
    return found


@pytest.mark.spec("R2.6")
async def test_whether_a_later_run_started_is_an_index_read_in_a_session_of_thousands_of_runs(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        run = await c.start_run(await new_session(c))
    sid = run.session_id
    row = await _run_row(db, sid, run.run_id)
    # The session's earlier questions: finished runs, all started before this one.
    await db.execute(
        "INSERT INTO runs (session_id, run_id, main_instance_id, status, snapshot_id,"
        " started_sequence) SELECT $1, 'earlier-' || g, 'main-' || g, 'finished', $2, 0"
        " FROM generate_series(1, $3::int) g",
        sid,
        row["snapshot_id"],
        EARLIER_RUNS,
    )
    await db.execute("ANALYZE runs")
    captured = _Captured()
    through = int(row["started_sequence"])
    await view_state._main_row(captured, sid, run.run_id, through, view_state.CHAIN_DEPTH)  # type: ignore[arg-type]
    plan = json.loads(await db.fetchval("EXPLAIN (FORMAT JSON) " + captured.sql, *captured.args))
    on_runs = [s for s in _scans(plan) if s[1] in ("runs", "runs_pkey", "runs_started")]
    assert on_runs == [("Index Scan", "runs_started")] or on_runs == [
        ("Index Only Scan", "runs_started")
    ], on_runs
    # And the answer is the same: no run started after this one's snapshot.
    async with db.acquire() as conn:
        state = await view_state.load_view_state(conn, sid, run.run_id)
    assert state is not None and not state.resumed
