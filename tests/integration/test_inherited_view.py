"""A new run's view reads only what it shows (issue 13: long sessions): the covered
records of a summarized history are counted in SQL, not read, except those a renderer
tracks (skill loads, activations), and the view rendered from that equals the one
rendered from every inherited record (R2.2, R2.3, R11.1)."""

from __future__ import annotations

import dataclasses

import asyncpg
import pytest

from domain.context.rendering import RecordView, ThreadRenderer
from storage.compaction.jobs import PgCompactionJobs
from storage.compaction.view_state import load_view_state
from storage.records.frontier import thread_frontier
from storage.records.threads import (
    PgThreads,
    inherited_records,
    inherited_view,
    run_snapshot,
    uncovered_records,
)
from storage.tokenizers import make_counter
from tests.integration.test_compaction import settled
from tests.integration.test_long_sessions import step
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration
COUNT = make_counter("estimate").count


def _render(
    records: list[RecordView], unread: int, covered: frozenset[str], summary_id: str
) -> ThreadRenderer:
    rend = ThreadRenderer(COUNT, 4, covered, summary_id)
    rend.add_summary("earlier work", 3)
    for rec in records:
        rend.feed(rec, inherited=True)
    rend.record_count += unread
    rend.seal_inherited()
    return rend


@pytest.mark.spec("R2.2", "R2.3", "R11.1")
async def test_a_new_run_reads_the_records_it_shows_and_counts_the_covered_ones(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        session = await new_session(
            c, context_policy={"recent_complete_groups": 1, "compaction": {"model_steps": 2}}
        )
        sid = session["session_id"]
        for q in range(3):
            run = await c.start_run(session)
            await c.append_user(run, f"question {q}", f"q{q}")
            for i in range(3):
                await step(c, run, db, f"r{q}s{i}")
            await c.finish_run(run)
        await settled(db, sid)
        run = await c.start_run(session)
        await c.prepare(run)  # the new run's snapshot is taken and committed
    async with db.acquire() as conn:
        snap = await run_snapshot(conn, sid, run.run_id)
        view = await load_view_state(conn, sid, run.run_id)
        assert snap is not None and view is not None and view.summary is not None
        covered = frozenset(view.summary.covered_record_ids)
        through = snap.through_session_sequence
        every = await inherited_records(conn, sid, through, covered)
        shown = await inherited_view(conn, sid, through, covered)
        uncovered = await uncovered_records(conn, sid, through, covered)
        # every record covered: only the tracked ones are read, the rest counted
        every_id = frozenset(r.record_id for r in every)
        tracked = await inherited_view(conn, sid, through, every_id)
        # A view continued from an earlier boundary (services.prepare.assembly.history):
        # the records before it as read then, the tail after it read alone.
        cuts = sorted({0, 1, through // 3, through // 2, through - 1})
        heads = [await inherited_view(conn, sid, cut, covered) for cut in cuts]
        # a compaction job's view goes on the same way (services.compaction.job_records)
        kept = [await uncovered_records(conn, sid, cut, covered) for cut in cuts]
    tails = [await PgThreads(db).inherited_tail(sid, cut, through, covered) for cut in cuts]
    jobs = PgCompactionJobs(db)
    for head_records, cut in zip(kept, cuts, strict=True):
        found = await jobs.inherited_after(sid, run.run_id, run.instance_id, cut, covered)
        assert found is not None and found[1] == through
        assert [r.record_id for r in head_records + found[0]] == [r.record_id for r in uncovered]
    later = await jobs.inherited_after(sid, run.run_id, run.instance_id, through + 1, covered)
    assert later is None  # a history kept past this run's boundary cannot serve it
    # The run's boundary and main instance are read once and kept (written once, with the
    # run); the job's frontier is the one read without them, its inputs not counted
    # (a job reads the plan and constraints: counting them read the whole session).
    assert jobs._runs[(sid, run.run_id)] == (through, run.instance_id)
    async with db.acquire() as conn:
        apart = await thread_frontier(conn, sid, run.run_id, run.instance_id)
    assert apart.task_version > 0
    job_frontier = await jobs.current_frontier(sid, run.run_id, run.instance_id)
    assert job_frontier == dataclasses.replace(apart, task_version=0)
    assert covered and shown.unread > 0  # a summarized history: most of it not read
    assert len(shown.records) + shown.unread == len(every)
    assert {r.kind for r in tracked.records} == {"run_started"}
    assert len(tracked.records) + tracked.unread == len(every) and tracked.unread > 0
    assert [r.record_id for r in uncovered] == [
        r.record_id for r in every if r.record_id not in covered
    ]
    full = _render(every, 0, covered, view.summary.summary_id)
    lean = _render(shown.records, shown.unread, covered, view.summary.summary_id)
    assert lean.messages == full.messages
    assert lean.record_count == full.record_count == len(every)
    assert lean.tokens == full.tokens and lean.skill_loads == full.skill_loads
    for head, tail in zip(heads, tails, strict=True):
        records, unread = head.records + tail.records, head.unread + tail.unread
        continued = _render(records, unread, covered, view.summary.summary_id)
        assert continued.messages == full.messages
        assert continued.record_count == full.record_count
        assert continued.tokens == full.tokens and continued.skill_loads == full.skill_loads
