"""One unanswered tool call never blocks compaction (R2.4, R5.1, R9.4, R11.1), through the
real stack: a tool that crashes mid-call (its result never comes) and 100 more questions
compact exactly as often as the same session whose call answered, and the crashed call's
group is covered whole, its outcome summarized as unknown."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from services.sdk.client import ContextClient
from storage.compaction import diagnostics
from tests.integration.test_compaction import round_
from tests.support.console import session_inspect, sign_in
from tests.support.flows import client, new_session, wait_committed
from tests.support.services import Services

pytestmark = pytest.mark.integration
QUESTIONS = 51  # ten compactions each: many, as R19 asks (101 took twice as long)
EVERY = 5  # questions per compaction (user_turns)


@pytest.fixture
async def ctx(services: Services) -> AsyncIterator[ContextClient]:
    async with client(services) as c:
        yield c


async def committed(db: asyncpg.Pool, sid: str) -> int:
    n = await db.fetchval(
        "SELECT count(*) FROM compaction_jobs WHERE session_id=$1 AND status='committed'", sid
    )
    return int(n)


async def until_committed(db: asyncpg.Pool, sid: str, n: int, timeout: float = 30) -> None:
    for _ in range(int(timeout / 0.05)):
        if await committed(db, sid) >= n:
            return
        await asyncio.sleep(0.05)
    jobs = await db.fetch(
        "SELECT status, stage, reason FROM compaction_jobs WHERE session_id=$1 ORDER BY created_at",
        sid,
    )
    raise AssertionError(f"{sid}: {n} commits expected, jobs: {[dict(j) for j in jobs]}")


async def session_of_questions(
    c: ContextClient, db: asyncpg.Pool, crash_first: bool
) -> tuple[str, list[dict[str, Any]]]:
    session = await new_session(
        c,
        context_policy={
            "recent_complete_groups": 1,
            "compaction": {"context_ratio": None, "user_turns": EVERY},
        },
    )
    sid = session["session_id"]
    prepared = []
    for q in range(QUESTIONS):
        run = await c.start_run(session)
        await c.append_user(run, f"Question {q}: what does module {q} do?", f"q{q}")
        if q == 0 and crash_first:
            await c.append_model_result(
                run, "Running the build.", "crash-m1", [("crash-c", "bash", '{"cmd": "make"}')]
            )  # the tool crashes: its result never comes
            await c.append_model_result(run, "The build tool did not answer.", "crash-m2")
        else:
            await round_(c, run, f"t{q}")
        prepared.append(await c.prepare(run))
        await c.finish_run(run)
        if q and q % EVERY == 0:  # the check at this prepare started a job: let it commit
            await until_committed(db, sid, q // EVERY)
    return sid, prepared


@pytest.mark.spec("R2.4", "R5.1", "R9.4", "R11.1", "R19")
async def test_a_tool_that_crashes_mid_call_never_blocks_compaction(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    (crashed, seen), (answered, _) = await asyncio.gather(
        session_of_questions(ctx, db, crash_first=True),
        session_of_questions(ctx, db, crash_first=False),
    )
    assert await committed(db, crashed) == await committed(db, answered) == QUESTIONS // EVERY
    deferred = await db.fetch(
        "SELECT reason FROM compaction_jobs WHERE session_id=$1 AND status <> 'committed'",
        crashed,
    )
    assert [d["reason"] for d in deferred] == []
    # The crashed call's group is covered whole by the first summary, its outcome unknown.
    call_record = await db.fetchval(
        "SELECT record_id FROM records WHERE session_id=$1 AND kind='assistant_message'"
        " AND payload->'tool_calls' @> $2::jsonb",
        crashed,
        [{"call_id": "crash-c"}],
    )
    first = await db.fetchrow(
        "SELECT covered_record_ids, summary FROM summary_revisions WHERE session_id=$1"
        " ORDER BY created_at LIMIT 1",
        crashed,
    )
    assert call_record in first["covered_record_ids"]
    cited = {
        sid
        for entries in first["summary"].values()
        if isinstance(entries, list)
        for e in entries
        if isinstance(e, dict)
        for sid in e.get("source_ids", [])
    }
    assert call_record in cited
    # Before the compaction the agent was shown the call's result as unknown; after, the
    # summary stands for it and no prepared context shows the call as open.
    assert "crash-c" in json.dumps(seen[0]["messages"])
    assert "crash-c" not in json.dumps(seen[-1]["messages"])


@pytest.mark.spec("R2.4", "R18")
async def test_the_inspector_shows_a_call_without_a_result_in_flight_then_answered_unknown(
    ctx: ContextClient, services: Services, db: asyncpg.Pool, pg_dsn: str, console: str
) -> None:
    session = await new_session(ctx)
    sid = session["session_id"]
    run = await ctx.start_run(session)
    await ctx.append_user(run, "Build it.", "q0")
    p, o = await ctx.append_model_result(
        run, "Building.", "m1", [("slow-c", "bash", '{"cmd": "make"}')]
    )
    await wait_committed(db, services, {p: o})  # (a prepare is refused while it waits)
    (call,) = await diagnostics.open_calls(db, sid)
    assert (call.call_id, call.tool, call.state) == ("slow-c", "bash", "in_flight")
    await ctx.append_model_result(run, "The build never answered; moving on.", "m2")
    await ctx.finish_run(run)
    await ctx.prepare(await ctx.start_run(session))
    (call,) = await diagnostics.open_calls(db, sid)
    assert call.state == "unknown"
    async with httpx.AsyncClient(base_url=console, timeout=30) as http:
        await sign_in(http, services.api_key)
        page = await http.get(f"/inspector/sessions/{sid}")
        assert page.status_code == 200, page.text
        row = page.text.split('id="open-calls"')[1].split("</table>")[0]
        assert "slow-c" in row and "answered unknown (the agent moved on)" in row
    listed = session_inspect(pg_dsn, sid)
    assert "tool call without a result: slow-c (bash) — answered unknown for compaction" in listed
