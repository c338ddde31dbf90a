"""A prepare's observation overtaken by the runtime's next appends (SPEC R7.2, R7.3, R8.4).

Prepare sends its budget observation without waiting for the broker's ack (it is
advisory), so the records the runtime appends right after the prepare can reach the
session's partition first. The trigger check must still be decided on the view the
prepare saw — through the observation's watermark — and a job it starts must record that
view's counters as its baseline, not counters that include steps it never summarized.

The overtaking is made deterministic here: the observation is published, as Prepare
would have, after the later records, with the watermark of the earlier view.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from schemas.wire import BudgetObservation, ControlEvent, encode_control
from services.sdk.client import ContextClient, RunHandle
from storage.compaction.state import lock_with_context
from storage.compaction.view_cache import view_of
from storage.compaction.view_state import counted_after
from tests.integration.test_compaction import question, reports, round_
from tests.support.flows import client, new_session, wait_committed
from tests.support.kafka import service_signed
from tests.support.services import Services

pytestmark = pytest.mark.integration


@pytest.fixture
async def ctx(services: Services) -> AsyncIterator[ContextClient]:
    async with client(services) as c:
        yield c


async def watermark(db: asyncpg.Pool, sid: str) -> int:
    return int(
        await db.fetchval("SELECT max(session_sequence) FROM records WHERE session_id=$1", sid)
    )


async def late_observation(
    ctx: ContextClient,
    db: asyncpg.Pool,
    services: Services,
    run: RunHandle,
    seen: dict[str, Any],
) -> str:
    """Publish the observation a prepare made of the view through ``seen["through"]``,
    after everything appended since; returns its key once the processor applied it."""
    key = f"obs:late-{uuid.uuid4().hex}"
    obs = BudgetObservation(
        estimated_input=90_000,
        input_budget=100_000,
        required_tokens=100,
        fixed_overhead=100,
        compressible_tokens=500,
        view_watermark=seen["through"],
        summary_id=None,
        fingerprint=uuid.uuid4().hex,
        policy_revision=seen["policy_revision"],
    )
    event = ControlEvent(
        key, run.session_id, run.run_id, run.instance_id, int(time.time() * 1000), obs
    )
    value, key_bytes = encode_control(event), run.session_id.encode()
    md = await ctx.producer._producer.send_and_wait(
        services.env("ALC_TOPIC_RECORDS"),
        value,
        key=key_bytes,
        headers=service_signed("prepare", key_bytes, value),
    )
    await wait_committed(db, services, {md.partition: md.offset})
    return key


async def thread(ctx: ContextClient, session: dict[str, Any], lineage: str) -> RunHandle:
    """A thread with one question and 2 action steps: the run's main thread, or a child
    thread of it (R13.1: its own counters and its own compaction lineage)."""
    if lineage == "main":
        return await question(ctx, session, "q", rounds=1)
    run = await ctx.start_run(session)
    await ctx.append_user(run, "Delegate the reading.", "parent-q")
    child = await ctx.export_for_child(run, lineage, [])
    await ctx.append_user(child, "Read the file.", "child-task")
    await round_(ctx, child, "c")
    return child


@pytest.mark.spec("R7.1", "R7.3", "R8.4", "R9.1", "R13.1", "R19")
@pytest.mark.parametrize("lineage", ["main", "child-reader-1"])
async def test_an_overtaken_observation_is_checked_on_the_view_its_prepare_saw(
    ctx: ContextClient, db: asyncpg.Pool, services: Services, lineage: str
) -> None:
    # The step trigger is out of reach, so the processor's own pre-emptive checks start
    # nothing; the late observation's token estimate (90% of its budget) starts the job.
    session = await new_session(
        ctx, context_policy={"compaction": {"context_ratio": 0.8, "model_steps": 100}}
    )
    sid = session["session_id"]
    run = await thread(ctx, session, lineage)  # 2 action steps
    prepared = await ctx.prepare(run)
    (first,) = await reports(db, sid, 1)
    assert first["values"]["model_steps"] == 2 and first["decision"] == "none"
    seen = {
        "through": await watermark(db, sid),
        "policy_revision": prepared["dependency_versions"]["policy_revision"],
    }
    for i in range(2):  # 4 more steps: 6 in the view now
        await round_(ctx, run, f"later{i}")
    key = await late_observation(ctx, db, services, run, seen)
    (late,) = [r for r in await reports(db, sid, 2) if r["event_key"] == key]
    assert late["lineage"] == lineage
    # Checked as the prepare saw it: 2 steps and 1 question — not the 6 steps there are.
    assert late["values"]["model_steps"] == 2, dict(late)
    assert late["counters"]["totals"] == {"user_turns": 1, "model_steps": 2}, dict(late)
    assert late["fired"] == ["context_ratio"] and late["decision"] == "job_started"
    # R8.4: the job's baseline is the view it summarizes through the watermark; the 4
    # steps after it are not in its summary, so they must still count after it.
    job = await db.fetchrow(
        "SELECT observed_user_turns, observed_model_steps, request FROM compaction_jobs"
        " WHERE job_id=$1",
        late["job_id"],
    )
    assert (job["observed_user_turns"], job["observed_model_steps"]) == (1, 2)
    assert job["request"]["view_watermark"] == seen["through"]


@pytest.mark.spec("R7.3", "R8.4", "R2.6")
async def test_what_the_lock_counts_after_a_watermark_is_what_the_view_counts_after_it(
    services: Services, db: asyncpg.Pool
) -> None:
    """An observation's lineage lock counts the records of the run's main view after the
    observation's watermark (``compaction_state.lock_with_context``) as
    ``view_state.counted_after`` does: for every watermark, for an older run (another
    run's later records are not its view's) and the newest one."""
    async with client(services) as c:
        session = await new_session(c)
        first = await question(c, session, "a", rounds=1)
        await c.finish_run(first)
        second = await question(c, session, "b", rounds=2)
        await c.prepare(second)  # everything above is committed
    sid = session["session_id"]
    last = await watermark(db, sid)
    seen = set()
    async with db.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            for run in (first, second):
                view = await view_of(conn, sid, run.run_id, "main")
                for seq in range(last + 1):
                    after = (seq, run.run_id)
                    locked = await lock_with_context(conn, sid, "main", None, after)
                    assert locked.later == await counted_after(conn, view, seq)
                    seen.add((run.run_id, locked.later))
        finally:
            await tx.rollback()
    assert len(seen) > 6  # the counts move with the watermark, and differ by run
