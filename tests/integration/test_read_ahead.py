"""A kept main view's read ahead (``storage.compaction.read_ahead``): the thread's new
records, its frontier and task count, and the main view's compaction row in one
statement, the same as the reads it replaces (``own_and_frontier``, and
``load_view_state`` reading its own row), before and after a summary commits; and a
prepare that uses it answers as the reads apart do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from services.sdk.client import ContextClient, RunHandle
from storage.compaction import view_state
from storage.compaction.read_ahead import read_ahead
from storage.compaction.summary_reuse import SUMMARY_COLUMNS, reusable, summary_ref
from storage.compaction.view_state import ViewStateCache, load_view_state
from storage.records.thread_frontier import FrontierQuery, own_and_frontier
from storage.records.threads import snapshot_boundary
from tests.integration.test_compaction import round_, script, settled
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration
__all__ = ["script"]  # the scripted model's fixture, used here too


@pytest.fixture
async def ctx(services: Services) -> AsyncIterator[ContextClient]:
    async with client(services) as c:
        yield c


async def same_as_apart(conn: asyncpg.Connection, sid: str, run: RunHandle, after: int) -> bool:
    """Read ahead and apart agree, on one snapshot (the processor may commit meanwhile: a
    job started, a step); returns whether the view shows a summary."""
    scope = (sid, run.run_id, run.instance_id)
    query = FrontierQuery(child=False)
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        through = await snapshot_boundary(conn, sid, run.run_id)
        ahead = await read_ahead(conn, scope, after, query, None, through)
        own, frontier, tasks = await own_and_frontier(conn, *scope, after, query)
        from_row = await load_view_state(conn, sid, run.run_id, through=through, row=ahead.view)
        apart = await load_view_state(conn, sid, run.run_id, through=through)
    assert (ahead.after, ahead.own, ahead.frontier, ahead.tasks) == (after, own, frontier, tasks)
    assert from_row == apart and apart is not None
    return apart.summary is not None


async def step_triggered(
    ctx: ContextClient,
) -> tuple[dict[str, Any], RunHandle, dict[str, Any]]:
    """A session whose fourth step starts a compaction job: the session, its run, and
    the prepare that started the job."""
    session = await new_session(
        ctx,
        context_policy={
            "recent_complete_groups": 1,
            "compaction": {"context_ratio": None, "model_steps": 4},
        },
    )
    run = await ctx.start_run(session)
    await ctx.append_user(run, "Fix the tokenizer bug.", "q1")
    for i in range(3):
        await round_(ctx, run, f"r{i}")
    return session, run, await ctx.prepare(run)


async def committed_summary(db: asyncpg.Pool, sid: str) -> None:
    jobs = await settled(db, sid, timeout=30, at_least=1)
    assert [j["status"] for j in jobs].count("committed") >= 1, [dict(j) for j in jobs]


@pytest.mark.spec("R2.6", "R2.7", "R4.4")
async def test_a_read_ahead_is_the_reads_it_replaces_before_and_after_a_summary(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session, run, first = await step_triggered(ctx)
    sid = session["session_id"]
    async with db.acquire() as conn:
        for after in (0, 3, 10**9):
            await same_as_apart(conn, sid, run, after)  # a job may have committed by now
    await committed_summary(db, sid)
    await round_(ctx, run, "r-after")
    second = await ctx.prepare(run)  # read ahead: the view was kept by the first
    assert any(m.get("block") == "summary" for m in second["messages"])
    assert second["record_count"] > first["record_count"]
    async with db.acquire() as conn:
        for after in (0, 3, 10**9):
            assert await same_as_apart(conn, sid, run, after)


@pytest.mark.spec("R2.7")
async def test_a_read_ahead_of_a_session_that_does_not_exist_has_no_view(
    db: asyncpg.Pool,
) -> None:
    async with db.acquire() as conn:
        ahead = await read_ahead(
            conn, ("no-such-session", "r", "i"), 0, FrontierQuery(child=False), None, 0
        )
        assert ahead.own == [] and ahead.view == {}
        assert (
            await load_view_state(conn, "no-such-session", "r", through=0, row=ahead.view) is None
        )


@pytest.mark.spec("R2.7")
async def test_the_rows_reuse_of_its_newest_summary_is_what_the_reuse_check_says(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    """A view's row reads whether the run may reuse the chain's newest summary; it says
    what ``summary_reuse.reusable`` says: for the summary's own run, for a later
    question's run (a prefix: reused), and for a view whose boundary is before the
    summary's records (they are not in it: not reused)."""
    session, first, _ = await step_triggered(ctx)
    sid = session["session_id"]
    await committed_summary(db, sid)
    await ctx.finish_run(first)
    second = await ctx.start_run(session)
    await ctx.append_user(second, "And the parser?", "q2")
    await ctx.prepare(second)
    verdicts = []
    async with db.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        for run, through in ((first, None), (second, None), (second, 1)):
            row = await view_state._main_row(conn, sid, run.run_id, through, view_state.CHAIN_DEPTH)
            assert row is not None and row["reuse_of"] is not None
            found = await conn.fetchrow(
                f"SELECT {SUMMARY_COLUMNS} FROM summary_revisions WHERE summary_id=$1",
                row["reuse_of"],
            )
            summary = summary_ref(found)
            cache = ViewStateCache()
            view_state._known_reuse(row, summary, run.run_id, cache)
            direct = await reusable(conn, summary, sid, run.run_id, int(row["through"]))
            assert cache.reusable[(summary.summary_id, run.run_id)] == direct
            verdicts.append(direct)
    assert verdicts == [True, True, False]
