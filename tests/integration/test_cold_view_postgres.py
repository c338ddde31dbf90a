"""A restarted Prepare continues a view from its render state stored in PostgreSQL
(issue 13: cold prepare): the packed state goes through the real ``render_states``
table, the new process reads no inherited history, and it prepares exactly what the view
that never stopped prepares (R4.3). A row damaged in the table costs a full render, not
a failed prepare."""

from __future__ import annotations

import uuid

import pytest

from services.prepare.assembly.views import ThreadViews
from storage.calls.render_states import PgRenderStates, StoredState
from storage.migrate import apply_dsn
from storage.pool import create_pool
from storage.records.threads import Snapshot
from tests.unit.test_cold_views import CountingThreads
from tests.unit.test_render_state import COUNT, LARGE, PROFILE, _prepared, _records

RUN, INST = "cur", "i-cur"


async def _prepare(views: ThreadViews, sid: str) -> bytes:
    rend, _ = await views.view(sid, RUN, INST, PROFILE.message_overhead, None, "e1", LARGE)
    return _prepared(rend)


@pytest.mark.spec("R4.3")
async def test_a_restarted_view_continues_from_its_state_in_postgres(pg_dsn: str) -> None:
    await apply_dsn(pg_dsn)
    pool = await create_pool(pg_dsn, 1, 2)
    sid = f"cold-{uuid.uuid4().hex[:8]}"
    records, start = _records(1500, seed=15)
    threads = CountingThreads(
        snapshots={(sid, RUN): Snapshot(1, sid, RUN, INST, start, "p1", "active")},
        records=records,
    )

    def views() -> ThreadViews:  # a new process: nothing in memory
        return ThreadViews(threads, COUNT, states=PgRenderStates(pool), counting="estimate")

    try:
        warm = views()
        before = await _prepare(warm, sid)
        await warm.flush()
        async with pool.acquire() as conn:
            head = await conn.fetchval(
                "SELECT substring(state FROM 1 FOR 24) FROM render_states WHERE session_id=$1",
                sid,
            )
        assert head == b"ALC-render-state/4+zstd\n"  # stored packed
        threads.inherited_reads = 0
        assert await _prepare(views(), sid) == before
        assert threads.inherited_reads == 0  # continued from the row, no history read
        # A damaged row: the checksum refuses it and the view renders from the records.
        async with pool.acquire() as conn:
            await conn.execute(
                "UPDATE render_states SET state = overlay(state PLACING '\\x00000000'::bytea"
                " FROM 60) WHERE session_id=$1",
                sid,
            )
        threads.inherited_reads = 0
        assert await _prepare(views(), sid) == before
        assert threads.inherited_reads == 1
    finally:
        async with pool.acquire() as conn:
            await conn.execute("DELETE FROM render_states WHERE session_id=$1", sid)
        await pool.close()


async def test_render_states_idle_past_their_retention_are_pruned(pg_dsn: str) -> None:
    await apply_dsn(pg_dsn)
    pool = await create_pool(pg_dsn, 1, 2)
    sid = f"prune-{uuid.uuid4().hex[:8]}"
    states = PgRenderStates(pool)
    try:
        for run, age_h in (("old", 100), ("recent", 1)):
            await states.save(sid, run, "i", "fp", StoredState(5, b"state"))
            async with pool.acquire() as conn:
                await conn.execute(
                    "UPDATE render_states SET saved_at = now() - make_interval(hours => $3)"
                    " WHERE session_id=$1 AND run_id=$2",
                    sid,
                    run,
                    age_h,
                )
        assert await states.prune(72 * 3600.0, batch=1) >= 1  # batches until none is left
        assert await states.load(sid, "old", "i", "fp") is None
        assert await states.load(sid, "recent", "i", "fp") == StoredState(5, b"state")
    finally:
        async with pool.acquire() as conn:
            await conn.execute("DELETE FROM render_states WHERE session_id=$1", sid)
        await pool.close()
