"""A batch's runs are written in two statements whatever their number (issue 37): the new
runs with their snapshots, then the changes — the last change of a run being its state
after the batch (R1.2, R1.3)."""

from __future__ import annotations

import asyncpg
import pytest

from domain.planning.state import BatchPlan, NewRun, RunChange
from storage.records import ingest
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration


@pytest.mark.spec("R1.2", "R1.3")
async def test_a_batchs_new_runs_and_their_changes_are_written_as_planned(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        sid = (await new_session(c))["session_id"]
    plan = BatchPlan()
    plan.new_runs = [
        NewRun(sid, f"batch-run-{i}", f"batch-run-{i}.main", 10 * i, 10 * i + 1, "p", i, 2 * i)
        for i in range(3)
    ]
    plan.run_changes = [
        RunChange(sid, "batch-run-0", "finished", 0, 1, 0),
        RunChange(sid, "batch-run-1", "finished", 0, 1, 0),
        RunChange(sid, "batch-run-1", "active", 1, 1, 0),  # resumed in the same batch
        RunChange(sid, "batch-run-1", "finished", 1, 2, 0),
    ]
    async with db.acquire() as conn, conn.transaction():
        await ingest._write_runs(conn, plan)
    rows = await db.fetch(
        "SELECT u.run_id, u.main_instance_id, u.status, u.resumes, u.ends, u.started_sequence,"
        " u.ended_at IS NOT NULL AS ended, x.through_session_sequence, x.user_turns,"
        " x.model_steps FROM runs u JOIN history_snapshots x USING (snapshot_id)"
        " WHERE u.session_id = $1 AND u.run_id LIKE 'batch-run-%' ORDER BY u.run_id",
        sid,
    )
    assert [tuple(r) for r in rows] == [
        ("batch-run-0", "batch-run-0.main", "finished", 0, 1, 1, True, 0, 0, 0),
        ("batch-run-1", "batch-run-1.main", "finished", 1, 2, 11, True, 10, 1, 2),
        ("batch-run-2", "batch-run-2.main", "active", 0, 0, 21, False, 20, 2, 4),
    ]
    # A later batch resumes the finished run 0 and finishes it again: a new end (its last
    # change's status is the one it had, but the batch reopened it); a refused resume of
    # run 1 changes only its counters.
    ended = "SELECT ended_at FROM runs WHERE session_id = $1 AND run_id = $2"
    before = {r: await db.fetchval(ended, sid, r) for r in ("batch-run-0", "batch-run-1")}
    later = BatchPlan()
    later.run_changes = [
        RunChange(sid, "batch-run-0", "active", 1, 1, 0),
        RunChange(sid, "batch-run-0", "finished", 1, 2, 0),
        RunChange(sid, "batch-run-1", "finished", 1, 2, 1),
    ]
    async with db.acquire() as conn, conn.transaction():
        await ingest._write_runs(conn, later)
    assert await db.fetchval(ended, sid, "batch-run-0") > before["batch-run-0"]
    assert await db.fetchval(ended, sid, "batch-run-1") == before["batch-run-1"]
