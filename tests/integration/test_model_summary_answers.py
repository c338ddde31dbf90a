"""Real stack (issue 36, item 4): the compaction service's OpenAI-compatible summarizer
against a scripted model that answers as real models do — around the schema. A server
that refuses ``json_schema``, an answer in prose with a code fence, in another language
than the transcript, with uncited entries and invented record ids, still compacts: the
cited entries are kept, the rest is left out. Only an answer with nothing cited fails,
at validation, and the view stays as it was."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from services.sdk.client import ContextClient
from tests.integration.test_compaction import question, settled, state
from tests.support.flows import client, new_session
from tests.support.model_server import Script
from tests.support.services import Services

pytestmark = pytest.mark.integration
_ID = re.compile(r"^\[(rec_[0-9a-f]+)\]", re.M)
POLICY: dict[str, Any] = {"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
# A summarizer on a model of its own: today's request (the agent's model would continue
# the agent's last request instead, issue 39 item 3).
OWN_MODEL: dict[str, Any] = {
    **POLICY,
    "purpose_profiles": {"compaction": {"model_profile_ref": "priced-compactor"}},
}
Reply = tuple[int, dict[str, Any] | str]
REQUEST_ZH = "请回答问题 k0，并保留所有数字"  # noqa: RUF001 (Chinese punctuation)
QUESTION_ZH = "问题 k1 还没有回答吗？"  # noqa: RUF001


@pytest.fixture
async def ctx(scripted: tuple[Services, Script]) -> AsyncIterator[ContextClient]:
    async with client(scripted[0]) as c:
        yield c


def segment_ids(body: dict[str, Any]) -> list[str]:
    return _ID.findall(body["messages"][-1]["content"].split("Segment to summarize:", 1)[-1])


def completion(content: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": content}
    return {
        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }


def answer_with(script: Script, make: Any) -> None:
    """The scripted server refuses ``json_schema`` as a server without structured output
    does, and answers ``make(segment ids)`` otherwise."""

    def reply(body: dict[str, Any]) -> Reply:
        with script.lock:
            script.hits += 1
            script.requests.append(body)
        if body.get("response_format", {}).get("type") == "json_schema":
            return 400, {"error": {"message": "response_format json_schema is not supported"}}
        return 200, completion(make(segment_ids(body)))

    script.reply = reply  # type: ignore[method-assign]


def messy(ids: list[str]) -> str:
    first, last = ids[0], ids[-1]
    doc = {
        "requests": [{"text": REQUEST_ZH, "source_ids": [first]}],
        "decisions": [{"text": "先读取文件 k00", "reason": "数据在那里", "sources": first}],
        "findings": [
            {"text": "an uncited finding", "source_ids": []},
            {"text": "an invented citation", "source_ids": ["rec_" + "f" * 32]},
            f"row1=7 was read [{last}]",
        ],
        "errors": {"text": "read_file k00 was slow", "fix": "none needed", "source_ids": [last]},
        "open_questions": [{"text": QUESTION_ZH, "source_ids": [last]}],
    }
    return "Voici le résumé :\n```json\n" + json.dumps(doc, ensure_ascii=False) + "\n```\nFin."


@pytest.mark.spec("R11.3", "R11.4", "R15.3")
async def test_an_off_schema_answer_in_another_language_still_compacts_with_its_cited_entries(
    scripted: tuple[Services, Script], ctx: ContextClient, db: asyncpg.Pool
) -> None:
    script = scripted[1]
    answer_with(script, messy)
    with script.lock:
        script.requests.clear()
    session = await new_session(ctx, context_policy=OWN_MODEL)
    run = await question(ctx, session, "k", rounds=2)
    await ctx.finish_run(run)
    run = await question(ctx, session, "l")
    await ctx.prepare(run)
    (job,) = await settled(db, session["session_id"])
    assert job["status"] == "committed", dict(job)
    rev = await db.fetchrow(
        "SELECT summary_text, covered_record_ids FROM summary_revisions WHERE job_id=$1",
        job["job_id"],
    )
    text = rev["summary_text"]
    for kept in (
        REQUEST_ZH,
        "先读取文件 k00 — because 数据在那里",
        "row1=7 was read",
        "read_file k00 was slow — fix: none needed",
        QUESTION_ZH,
    ):
        assert kept in text, text
    assert "uncited finding" not in text and "invented citation" not in text
    assert "f" * 32 not in text
    cited = {i for group in re.findall(r"\[([^\]]+)\]", text) for i in group.split(", ")}
    assert {i for i in cited if i.startswith("rec_")} <= set(rev["covered_record_ids"])
    formats = [r.get("response_format", {}).get("type") for r in script.requests]
    assert formats[:2] == ["json_schema", "json_object"]  # refused once, then remembered
    assert set(formats[2:]) <= {"json_object"}


@pytest.mark.spec("R11.4", "R15.3")
async def test_an_answer_with_nothing_cited_fails_at_validation_and_keeps_the_view(
    scripted: tuple[Services, Script], ctx: ContextClient, db: asyncpg.Pool
) -> None:
    def uncited(ids: list[str]) -> str:
        doc = {"findings": [{"text": "no source", "source_ids": []}], "errors": ["no id"]}
        return json.dumps(doc)

    answer_with(scripted[1], uncited)
    session = await new_session(ctx, context_policy=OWN_MODEL)
    run = await question(ctx, session, "m", rounds=2)
    await ctx.finish_run(run)
    run = await question(ctx, session, "n")
    await ctx.prepare(run)
    (job,) = await settled(db, session["session_id"])
    assert (job["status"], job["stage"]) == ("failed", "validate"), dict(job)
    assert "uncited" in job["reason"]
    st = await state(db, session["session_id"])
    assert st["current_summary_id"] is None and st["baseline_user_turns"] == 0


def cited(ids: list[str]) -> str:
    doc = {"findings": [{"text": "row1=7 was read", "source_ids": [ids[0], ids[-1]]}]}
    return json.dumps(doc)


@pytest.mark.spec("R11.3", "R11.4")
async def test_the_agents_own_model_summarizes_by_continuing_the_agents_last_request(
    scripted: tuple[Services, Script], ctx: ContextClient, db: asyncpg.Pool
) -> None:
    """Issue 39 item 3: the summarizer is the agent's model (the release's profile serves
    both purposes), so its request is the agent's last rendered request of the thread,
    byte for byte, plus one instruction indexing the segment; tools kept, none callable."""
    script = scripted[1]
    answer_with(script, cited)
    with script.lock:
        script.requests.clear()
    session = await new_session(ctx, context_policy=POLICY)
    run = await question(ctx, session, "f", rounds=2)
    rendered = [(await ctx.prepare(run, render=True))["provider"]["request"]]
    await ctx.finish_run(run)
    run = await question(ctx, session, "g")
    rendered.append((await ctx.prepare(run, render=True))["provider"]["request"])
    (job,) = await settled(db, session["session_id"])
    assert job["status"] == "committed", dict(job)
    with script.lock:
        forked = [r for r in script.requests if "tool_choice" in r]
    (body,) = forked  # one segment, one call, and it continued the agent's request
    agent = next(r for r in rendered if r["messages"] == body["messages"][:-1])
    assert json.dumps(body["messages"][:-1]) == json.dumps(agent["messages"])
    assert body["tools"] == agent["tools"] and body["tool_choice"] == "none"
    assert body["prompt_cache_key"] == agent["prompt_cache_key"]
    assert "response_format" not in body
    covered = await db.fetchval(
        "SELECT covered_record_ids FROM summary_revisions WHERE job_id=$1", job["job_id"]
    )
    assert set(segment_ids(body)) == set(covered)  # the index names what the job covers
