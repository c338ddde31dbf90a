"""Hooks run per release (issue 28, R14, R17, R1.4): one deployment loads a prepare/model
hook and a compaction hook; release A binds them in ``context_policy.hook_bindings``,
release B binds nothing. Only A's calls see their effects — at ``context.prepare.before``,
``model.chat.before`` and ``context.compact.before/after``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from services.sdk.client import ContextClient, RunHandle
from tests.integration.test_compaction import question
from tests.support.flows import client, new_session
from tests.support.services import Services, start_services
from tests.support.stack import Stack

pytestmark = pytest.mark.integration

BOUND = [
    {"point": "context.prepare.before", "hook": "marker", "version": "3"},
    {"point": "model.chat.before", "hook": "marker", "version": "3"},
    {"point": "context.compact.before", "hook": "tag-and-keep", "version": "7"},
    {"point": "context.compact.after", "hook": "tag-and-keep", "version": "7"},
]
ASK_HOOK = {"citation_id": "ask-hook", "version": "1", "text": "placeholder"}


@pytest.fixture(scope="module")
def loaded(stack: Stack, pg_dsn: str) -> Iterator[Services]:
    svc = start_services(
        stack,
        pg_dsn,
        ALC_PREPARE_HOOKS="tests.support.prepare_hooks:make",
        ALC_COMPACTION_HOOKS="tests.support.hooks:make",
    )
    yield svc
    svc.stop()


async def _session(c: ContextClient, bindings: list[dict[str, Any]]) -> dict[str, Any]:
    policy = {
        "recent_complete_groups": 1,
        "compaction": {"user_turns": 2},
        "hook_bindings": bindings,
    }
    return await new_session(c, context_policy=policy)


async def _prepare_and_check(c: ContextClient, run: RunHandle) -> tuple[Any, Any]:
    prepared = await c.prepare(run, material=[ASK_HOOK])
    return prepared, await c.check_model_call(run, prepared)


@pytest.mark.spec("R14", "R17", "R1.4")
async def test_only_the_release_that_binds_a_prepare_and_model_hook_sees_its_effects(
    loaded: Services,
) -> None:
    async with client(loaded) as c:
        runs = {}
        for name, bindings in (("A", BOUND), ("B", [])):
            run = await c.start_run(await _session(c, bindings))
            await c.append_user(run, "What changed? [hook-add 200]", f"q-{name}")
            runs[name] = await _prepare_and_check(c, run)
    (prep_a, call_a), (prep_b, call_b) = runs["A"], runs["B"]
    mats_a = [m for m in prep_a["messages"] if m["block"] == "material"]
    mats_b = [m for m in prep_b["messages"] if m["block"] == "material"]
    # context.prepare.before: A's hook swapped the placeholder for its own passage.
    assert [m["origins"] for m in mats_a] == [["hook:marker@3"]]
    assert "Hook-provided passage." in mats_a[0]["content"]
    assert [m["origins"] for m in mats_b] == [["request"]]
    assert "placeholder" in mats_b[0]["content"]
    # model.chat.before: A's request carries the hook's messages, B's is as prepared.
    assert call_a["hook_versions"] == ["marker@3"]
    assert call_a["budget"]["hook_tokens"] > 0
    assert call_b["hook_versions"] == []
    assert call_b["budget"]["hook_tokens"] == 0
    sent_b = str(call_b["request"])
    assert "note note" in str(call_a["request"]) and "note note" not in sent_b


async def _committed_job(db: asyncpg.Pool, session_id: str) -> asyncpg.Record:
    for _ in range(400):
        job = await db.fetchrow("SELECT * FROM compaction_jobs WHERE session_id=$1", session_id)
        if job is not None and job["status"] != "requested":
            break
        await asyncio.sleep(0.05)
    assert job is not None and job["status"] == "committed", job
    return job


@pytest.mark.spec("R14", "R17", "R1.4", "R11.1")
async def test_only_the_release_that_binds_a_compaction_hook_has_its_summaries_patched(
    loaded: Services, db: asyncpg.Pool
) -> None:
    summaries: dict[str, tuple[asyncpg.Record, str]] = {}
    async with client(loaded) as c:
        for name, bindings in (("A", BOUND), ("B", [])):
            session = await _session(c, bindings)
            first = await question(c, session, f"h{name}a")
            await c.finish_run(first)
            second = await question(c, session, f"h{name}b")
            await c.prepare(second)
            job = await _committed_job(db, session["session_id"])
            rev = await db.fetchrow(
                "SELECT * FROM summary_revisions WHERE job_id=$1", job["job_id"]
            )
            first_candidate = await db.fetchval(
                "SELECT record_id FROM records WHERE session_id=$1 AND kind='run_started'"
                " ORDER BY session_sequence LIMIT 1",
                session["session_id"],
            )
            summaries[name] = (rev, first_candidate)
    (rev_a, kept_a), (rev_b, first_b) = summaries["A"], summaries["B"]
    # context.compact.after patched A's text; context.compact.before kept its first
    # candidate verbatim. B's job ran with no hook: untagged, its first record covered.
    assert "[reviewed]" in rev_a["summary_text"]
    assert kept_a not in rev_a["covered_record_ids"]
    assert "[reviewed]" not in rev_b["summary_text"]
    assert first_b in rev_b["covered_record_ids"]
