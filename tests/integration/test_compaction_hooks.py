"""Compaction with the built-in extractive summarizer and configured compact hooks:
a summarized skill load has its instruction re-provided once, hooks narrow and patch
(R11.1, R12.3, R14)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator

import asyncpg
import pytest

from schemas.contracts import SkillRef
from tests.integration.test_compaction import question, round_
from tests.support.flows import client, new_session
from tests.support.services import Services, start_services
from tests.support.stack import Stack

pytestmark = pytest.mark.integration
SKILL = "# checklist skill\nAlways list the files you touched."


@pytest.fixture(scope="module")
def hooked(stack: Stack, pg_dsn: str) -> Iterator[Services]:
    svc = start_services(stack, pg_dsn, ALC_COMPACTION_HOOKS="tests.support.hooks:make")
    yield svc
    svc.stop()


@pytest.mark.spec("R11.1", "R12.3", "R14", "R11.5", "R19")
async def test_skill_summarized_then_execution_continues_with_its_instruction_exactly_once(
    hooked: Services, db: asyncpg.Pool
) -> None:
    async with client(hooked) as c:
        session = await new_session(
            c,
            context_policy={
                "recent_complete_groups": 1,
                "compaction": {"user_turns": 2},
                # The loaded hook runs for releases that bind it (issue 28).
                "hook_bindings": [
                    {"point": p, "hook": "tag-and-keep", "version": "7"}
                    for p in ("context.compact.before", "context.compact.after")
                ],
            },
            skill_bindings=[
                {
                    "name": "checklist",
                    "version": "1",
                    "description": "House checklist",
                    "load_entry": "load_skill",
                    "content_sha256": hashlib.sha256(SKILL.encode()).hexdigest(),
                }
            ],
        )
        a = await question(c, session, "sa")
        await c.append_model_result(
            a,
            "Loading the checklist skill.",
            "sa-load",
            [("sa-skill", "load_skill", '{"name": "checklist"}')],
        )
        await c.append_tool_outcome(
            a,
            "sa-skill",
            "load_skill",
            SKILL,
            tool_kind="skill_load",
            skill=SkillRef("checklist", "1", hashlib.sha256(SKILL.encode()).hexdigest()),
        )
        await c.activate_resource(a, "skill", "checklist", "1", SKILL)
        await round_(c, a, "sa-work")
        await c.finish_run(a)
        b = await question(c, session, "sb")
        before = await c.prepare(b)
        for _ in range(400):
            job = await db.fetchrow(
                "SELECT * FROM compaction_jobs WHERE session_id=$1", session["session_id"]
            )
            if job is not None and job["status"] != "requested":
                break
            await asyncio.sleep(0.05)
        assert job is not None and job["status"] == "committed", job
        rev = await db.fetchrow("SELECT * FROM summary_revisions WHERE job_id=$1", job["job_id"])
        view = await c.prepare(b)
    skill_rec = await db.fetchval(
        "SELECT record_id FROM records WHERE session_id=$1 AND event_key='tool:sa-skill'",
        session["session_id"],
    )
    # Before the summary: the real load result shows the body, as the skill instruction.
    shown = [m for m in before["messages"] if SKILL in (m["content"] or "")]
    assert [(m["role"], m["block"], m["retention"]) for m in shown] == [
        ("tool", "skill_instruction", "required")
    ]
    # The load group is summarized; execution continues with the instruction re-provided
    # from the same revision — present exactly once, counted as required skills.
    assert skill_rec in rev["covered_record_ids"]
    shown = [m for m in view["messages"] if SKILL in (m["content"] or "")]
    assert len(shown) == 1, shown
    assert shown[0]["block"] == "skill_instruction"
    assert shown[0]["reason"] == "skill_reprovided_after_summary"
    assert shown[0]["record_ids"] == [skill_rec]
    assert view["budget"]["items"]["skills"] >= len(SKILL.split())
    assert any(p["block_id"] == shown[0]["block_id"] for p in view["protected_block_manifest"])
    assert "[reviewed]" in rev["summary_text"]  # after-hook patched the text
    first = await db.fetchval(
        "SELECT record_id FROM records WHERE session_id=$1 AND kind='run_started'"
        " ORDER BY session_sequence LIMIT 1",
        session["session_id"],
    )
    assert first not in rev["covered_record_ids"]  # before-hook kept its first candidate
