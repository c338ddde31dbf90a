"""Issue 25 findings 6 and 7 on the real stack: a thread retracts only records of its own
view (a child not its parent's, nor a sibling's; a parent not a child's), and a tool
result that its call still waits for is not retracted — so the run is never stranded
behind ``tool_results_pending`` (domain/policy/retraction_rules.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from domain.planning.state import record_id_for
from schemas.contracts import Authority, Content, RecordKind, RetractionPayload
from services.sdk.client import ContextClient, RunHandle
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration


@pytest.fixture
async def ctx(services: Services) -> AsyncIterator[ContextClient]:
    async with client(services) as c:
        yield c


def rid(run: RunHandle, key: str) -> str:
    return record_id_for(run.space_id, run.session_id, key)


async def retract(ctx: ContextClient, by: RunHandle, target: str, key: str) -> None:
    await ctx.append(
        ctx._event(
            by,
            RecordKind.RECORD_RETRACTED,
            Authority.HOST,
            Content.text(""),
            RetractionPayload(target, "undo"),
            key,
            operation_id=target,
        )
    )


async def decided(db: asyncpg.Pool, sid: str, key: str, timeout: float = 30.0) -> tuple[str, str]:
    """("committed", "") or (outcome, code) once the processor decided ``key``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if await db.fetchval(
            "SELECT 1 FROM records WHERE session_id=$1 AND event_key=$2", sid, key
        ):
            return "committed", ""
        row = await db.fetchrow(
            "SELECT outcome, code FROM event_outcomes WHERE session_id=$1 AND event_key=$2",
            sid,
            key,
        )
        if row is not None:
            return row["outcome"], row["code"]
        await asyncio.sleep(0.05)
    raise AssertionError(f"{key} not decided in {timeout}s")


def texts(prepared: dict[str, Any]) -> str:
    return json.dumps(prepared["messages"])


@pytest.mark.spec("R13.1", "R13.3", "R3.3")
async def test_a_thread_retracts_only_its_own_records(ctx: ContextClient, db: asyncpg.Pool) -> None:
    session = await new_session(ctx)
    parent = await ctx.start_run(session)
    await ctx.append_user(parent, "The parent's question: count the rows of t1.", "q1")
    child = await ctx.export_for_child(parent, f"{parent.instance_id}.c1", [])
    sibling = await ctx.export_for_child(parent, f"{parent.instance_id}.c2", [])
    await ctx.append_user(child, "The child's own note.", "c1-note", supplement=True)
    await ctx.append_user(sibling, "The sibling's note.", "c2-note", supplement=True)
    sid = parent.session_id

    # The finding: a record_retracted in the child's scope naming the parent's question.
    await retract(ctx, child, rid(parent, "q1"), "x-child-parent")
    assert await decided(db, sid, "x-child-parent") == ("dead_letter", "retraction_out_of_scope")
    # A sibling's record, and (the parent's way) a child's record: refused alike.
    await retract(ctx, child, rid(sibling, "c2-note"), "x-sibling")
    await retract(ctx, parent, rid(child, "c1-note"), "x-parent-child")
    for key in ("x-sibling", "x-parent-child"):
        assert await decided(db, sid, key) == ("dead_letter", "retraction_out_of_scope"), key
    assert not await db.fetch(
        "SELECT 1 FROM records WHERE session_id=$1 AND kind='record_retracted'", sid
    )
    # Every view still has what its own thread said.
    assert "count the rows of t1" in texts(await ctx.prepare(parent))
    assert "The sibling's note." in texts(await ctx.prepare(sibling))
    assert "The child's own note." in texts(await ctx.prepare(child))
    # A thread's own record is retracted as before.
    await retract(ctx, child, rid(child, "c1-note"), "x-own")
    assert await decided(db, sid, "x-own") == ("committed", "")
    assert "The child's own note." not in texts(await ctx.prepare(child))


@pytest.mark.spec("R2.2", "R13.1")
async def test_a_main_thread_still_retracts_the_history_it_inherited(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    """What an SDK pops may be the previous question's answer (openai_agents.pop_item)."""
    session = await new_session(ctx)
    a = await ctx.start_run(session)
    await ctx.append_user(a, "First question.", "qa")
    await ctx.append_model_result(a, "The first answer.", "a-op1")
    await ctx.finish_run(a)
    b = await ctx.start_run(session)
    await ctx.append_user(b, "Second question.", "qb")
    await retract(ctx, b, rid(a, "model:a-op1"), "x-inherited")
    assert await decided(db, b.session_id, "x-inherited") == ("committed", "")
    assert "The first answer." not in texts(await ctx.prepare(b))


@pytest.mark.spec("R5.1", "R5.2", "R15.3")
async def test_retracting_a_result_its_call_waits_for_is_refused_and_the_run_goes_on(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(ctx)
    run = await ctx.start_run(session)
    sid = run.session_id
    await ctx.append_user(run, "Read notes.txt.", "q1")
    call = ("call-n1", "read_file", json.dumps({"path": "notes.txt"}))
    await ctx.append_model_result(run, "Reading it.", "op-1", [call])
    await ctx.append_tool_outcome(run, "call-n1", "read_file", "the notes say 42")
    # The finding: the latest tool outcome retracted left every prepare 409
    # tool_results_pending, and re-sending the outcome was deduplicated away.
    await retract(ctx, run, rid(run, "tool:call-n1"), "x-outcome")
    assert await decided(db, sid, "x-outcome") == ("rejected", "retraction_of_awaited_outcome")
    after = await ctx.prepare(run)  # not stranded: the call keeps its real result
    tool_msgs = [m for m in after["messages"] if m.get("role") == "tool"]
    assert [m.get("tool_call_id") for m in tool_msgs] == ["call-n1"], after["messages"]
    assert "the notes say 42" in texts(after)
    # Withdrawing the interaction: the call first, then nothing waits for its result.
    await retract(ctx, run, rid(run, "model:op-1"), "x-call")
    assert await decided(db, sid, "x-call") == ("committed", "")
    await retract(ctx, run, rid(run, "tool:call-n1"), "x-outcome-2")
    assert await decided(db, sid, "x-outcome-2") == ("committed", "")
    final = await ctx.prepare(run)  # the follow-up prepare: no pending call, nothing left
    assert "call-n1" not in texts(final) and "the notes say 42" not in texts(final)
    assert "Read notes.txt." in texts(final)
