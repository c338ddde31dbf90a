"""A session whose first question was summarized, with a model call made after it: what
the inspector (tests/browser) and ``agentloom session inspect`` (tests/integration) show."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import asyncpg

from services.sdk.client import ContextClient, RunHandle
from tests.support.flows import new_session


async def summarized_call(
    c: ContextClient,
    db: asyncpg.Pool,
    before_call: Callable[[ContextClient, RunHandle], Awaitable[None]] | None = None,
) -> tuple[str, str, str]:
    """A session whose first question was summarized, and a model call made after it:
    (session_id, call_id, the id of a long covered tool result). ``before_call``: what
    the second run appends once the summary is in effect, before the call's prepare."""
    session = await new_session(
        c, context_policy={"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
    )
    first = await c.start_run(session)
    await c.append_user(first, "Question a?", "a-q")
    for i in range(2):
        await c.append_model_result(
            first, f"Looking at a{i}.", f"a{i}-m1", [(f"a{i}-c", "read_file", json.dumps({}))]
        )
        body = " ".join(f"row{j}={j * 7}" for j in range(600))  # > one read-back page
        await c.append_tool_outcome(first, f"a{i}-c", "read_file", body)
        await c.append_model_result(first, f"a{i} read.", f"a{i}-m2")
    await c.finish_run(first)
    run = await c.start_run(session)
    await c.append_user(run, "Question b?", "b-q")
    await c.prepare(run)  # the second question fires the user_turns trigger
    sid = session["session_id"]
    summary_id = None
    for _ in range(400):
        summary_id = await db.fetchval(
            "SELECT current_summary_id FROM compaction_state WHERE session_id=$1"
            " AND lineage='main'",
            sid,
        )
        if summary_id:
            break
        await asyncio.sleep(0.05)
    assert summary_id, "the first question was not summarized"
    if before_call is not None:
        await before_call(c, run)
    prepared = await c.prepare(run)
    assert prepared["dependency_versions"]["summary_id"] == summary_id
    call = await c.check_model_call(run, prepared)
    covered = await db.fetchval(
        "SELECT covered_record_ids FROM summary_revisions WHERE summary_id=$1", summary_id
    )
    long_id = await db.fetchval(
        "SELECT record_id FROM records WHERE record_id = ANY($1) AND kind='tool_outcome'"
        " ORDER BY session_sequence LIMIT 1",
        list(covered),
    )
    return sid, call["call_id"], long_id
