"""SPEC R19 session scenarios that the foundation already carries (issue 5 builds on
them): threads per question, full inheritance exactly once, failures and cancellations
inherited, interrupted calls never replayed, old runs resumed without later questions."""

from __future__ import annotations

import json

import asyncpg
import pytest

from schemas.contracts import ToolStatus
from services.sdk.client import ApiError, ContextClient, RunHandle
from tests.support.flows import client, new_session, wait_committed
from tests.support.services import Services

pytestmark = pytest.mark.integration


async def _round(
    c: ContextClient, run: RunHandle, tag: str, status: ToolStatus = ToolStatus.OK
) -> None:
    await c.append_model_result(
        run, f"step {tag}", f"{tag}-m", [(f"{tag}-c", "search", json.dumps({"q": tag}))]
    )
    await c.append_tool_outcome(run, f"{tag}-c", "search", f"result of {tag}", status)


@pytest.mark.spec("R1.1", "R19")
async def test_many_loops_of_one_question_keep_the_thread(services: Services) -> None:
    async with client(services) as c:
        session = await new_session(c)
        run = await c.start_run(session)
        await c.append_user(run, "one question", "q")
        seen = set()
        for i in range(5):  # five model/tool loops of the same question
            await _round(c, run, f"loop{i}")
            p = await c.prepare(run)
            seen.add((p["run_id"], p["instance_id"]))
    assert seen == {(run.run_id, run.instance_id)}


@pytest.mark.spec("R1.1", "R2.2", "R2.3", "R19")
async def test_a_new_question_gets_a_new_thread_with_the_full_history(services: Services) -> None:
    async with client(services) as c:
        session = await new_session(c)
        first = await c.start_run(session)
        await c.append_user(first, "first", "q1")
        await _round(c, first, "a")
        await c.append_model_result(first, "answer one", "a-final")
        await c.finish_run(first)
        second = await c.start_run(session)
        await c.append_user(second, "second", "q2")
        p = await c.prepare(second)
    assert (second.run_id, second.instance_id) != (first.run_id, first.instance_id)
    contents = [m["content"] for m in p["messages"]]
    assert contents[1:] == ["first", "step a", "result of a", "answer one", "second"]


@pytest.mark.spec("R2.2", "R2.4", "R19")
async def test_failed_and_cancelled_records_are_inherited_and_old_calls_never_replayed(
    services: Services,
) -> None:
    async with client(services) as c:
        session = await new_session(c)
        a = await c.start_run(session)
        await c.append_user(a, "try things", "qa")
        await _round(c, a, "bad", ToolStatus.ERROR)
        await c.append_model_result(
            a, "now a slow call", "slow-m", [("slow-c", "crawl", '{"site": "example"}')]
        )
        await c.finish_run(a, cancelled=True, reason="user stopped")  # slow-c never answered
        b = await c.start_run(session)
        await c.append_user(b, "what happened?", "qb")
        p = await c.prepare(b)
    msgs = p["messages"]
    assert any(m.get("status") == "error" and m["content"] == "result of bad" for m in msgs)
    unknown = [m for m in msgs if m["block"] == "state" and "slow-c" in m["content"]]
    assert unknown and "result unknown" in unknown[0]["content"]
    assert any("cancelled" in m["content"] for m in msgs if m["block"] == "state")
    # never replayed, never given a made-up result: no tool message, no open call
    assert not any(m.get("tool_call_id") == "slow-c" for m in msgs)
    assert not any(c_["id"] == "slow-c" for m in msgs for c_ in m.get("tool_calls", []))


@pytest.mark.spec("R2.3", "R3.1", "R19")
async def test_seven_questions_in_a_row_never_duplicate_and_keep_the_first_sources(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        session = await new_session(c)
        for q in range(7):
            run = await c.start_run(session)
            await c.append_user(run, f"question {q}", f"q{q}")
            await _round(c, run, f"r{q}")
            await c.append_model_result(run, f"answer {q}", f"r{q}-final")
            p = await c.prepare(run)
            ids = [i for m in p["messages"] for i in m["record_ids"]]
            assert len(ids) == len(set(ids))  # each source exactly once, every round
            await c.finish_run(run)
        first = await db.fetch(
            "SELECT record_id FROM records WHERE session_id=$1 AND event_key LIKE 'r0%'",
            session["session_id"],
        )
        assert {r["record_id"] for r in first} <= set(ids)  # round 1 still there, verbatim
        for r in first:  # ... and readable back by id
            back = await c.read_record(session["session_id"], r["record_id"])
            assert back["record_id"] == r["record_id"]


@pytest.mark.spec("R1.2", "R2.5", "R19")
async def test_resuming_an_old_run_mixes_in_no_later_question_and_is_idempotent(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        session = await new_session(c)
        a = await c.start_run(session)
        await c.append_user(a, "question A", "qa")
        await c.finish_run(a)
        b = await c.start_run(session)
        await c.append_user(b, "question B", "qb")
        await c.finish_run(b)
        p1, o1 = await c.resume_run(a)
        # the same resume delivered twice (e.g. a retried publish) changes nothing
        again = await c.append(c._event(a, *_resume_parts(c, a)))
        await wait_committed(db, services, {p1: max(o1, again[1])})
        view = await c.prepare(a)
        contents = [m["content"] for m in view["messages"]]
        assert "question A" in contents and "question B" not in contents
        resumes = await db.fetchval(
            "SELECT count(*) FROM records WHERE session_id=$1 AND kind='run_resumed'",
            session["session_id"],
        )
        assert resumes == 1
        assert view["instance_id"] == a.instance_id  # the original thread (R1.2)


def _resume_parts(c: ContextClient, run: RunHandle) -> tuple:  # type: ignore[type-arg]
    from schemas.contracts import Authority, Content, RecordKind, RunLifecyclePayload

    return (
        RecordKind.RUN_RESUMED,
        Authority.HOST,
        Content.text(""),
        RunLifecyclePayload(),
        f"run_resumed:{run.run_id}:1",  # the resume after the run's first end
    )


@pytest.mark.spec("R16", "R18", "R15.3")
async def test_a_stale_expected_revision_keeps_the_result_and_reports_the_conflict(
    services: Services, db: asyncpg.Pool
) -> None:
    from schemas.wire import decode_observability
    from tests.support.flows import read_topic

    async with client(services) as c:
        session = await new_session(c)
        run = await c.start_run(session)
        await c.append_user(run, "go", "q")
        await c.append_model_result(run, "first", "m1")
        # The runtime computed this result against revision 1 (before "first" landed).
        await c.append_model_result(run, "second, from a stale view", "m2", expected_revision=1)
        view = await c.prepare(run)
    assert [m["content"] for m in view["messages"]][-2:] == [
        "first",
        "second, from a stale view",
    ]  # kept, in order, appended once
    events = [
        decode_observability(v)
        for _, v in await read_topic(
            services.stack.kafka_bootstrap,
            services.env("ALC_TOPIC_OBSERVABILITY"),
            want=100_000,
            timeout=2,
        )
    ]
    conflicts = [
        e for e in events if e.kind == "revision_conflict" and e.session_id == session["session_id"]
    ]
    assert len(conflicts) == 1
    assert conflicts[0].values == {"expected_revision": 1.0, "thread_revision": 3.0}


@pytest.mark.spec("R5.3", "R2.2", "R19")
async def test_supplements_given_during_a_resume_reach_the_next_questions_history(
    services: Services,
) -> None:
    async with client(services) as c:
        session = await new_session(c)
        a = await c.start_run(session)
        await c.append_user(a, "question A", "qa")
        await c.finish_run(a)
        b = await c.start_run(session)
        await c.append_user(b, "question B", "qb")
        await c.finish_run(b)
        await c.resume_run(a)
        await c.append_model_result(a, "working", "a-m", [("a-c", "search", "{}")])
        # the supplement arrives while the tool call is open: it waits for the group
        await c.append_user(a, "supplement to A", "a-supp", supplement=True)
        await c.append_tool_outcome(a, "a-c", "search", "found it")
        resumed = await c.prepare(a)
        await c.finish_run(a)
        c_run = await c.start_run(session)
        await c.append_user(c_run, "question C", "qc")
        later = await c.prepare(c_run)
    order = [m["content"] for m in resumed["messages"]][1:]
    assert order == ["question A", "working", "found it", "supplement to A"]  # R5.3
    history = [m["content"] for m in later["messages"]]
    assert "supplement to A" in history
    assert history.index("question B") < history.index("supplement to A")


@pytest.mark.spec("R15.4")
async def test_credentials_never_enter_context_but_the_original_is_kept(
    services: Services, db: asyncpg.Pool
) -> None:
    secret = "AKIAIOSFODNN7EXAMPLE"
    async with client(services) as c:
        session = await new_session(c)
        run = await c.start_run(session)
        await c.append_user(run, "show the deploy config", "q")
        await c.append_model_result(run, "reading", "m", [("c1", "read_file", "{}")])
        await c.append_tool_outcome(run, "c1", "read_file", f"aws_key: {secret}\nregion: eu")
        view = await c.prepare(run)
        tool = next(m for m in view["messages"] if m["role"] == "tool")
        assert secret not in str(view["messages"])
        assert tool["redactions"] == 1 and "region: eu" in tool["content"]
        rid = tool["record_ids"][0]
        assert secret in (await c.read_record(session["session_id"], rid))["content"]


@pytest.mark.spec("R3.3", "R15.4")
async def test_another_actors_session_is_not_readable_without_an_explicit_grant(
    services: Services,
) -> None:
    async with client(services) as c:
        session = await new_session(c)
        sid = session["session_id"]
        run = await c.start_run(session)
        await c.append_user(run, "private question", "q")
        await c.prepare(run)
        rid = (await c.prepare(run))["messages"][1]["record_ids"][0]
        owner = session["actor_id"]
        assert (await c.read_record(sid, rid, actor=owner))["content"] == "private question"
        with pytest.raises(ApiError) as refused:
            await c.read_record(sid, rid, actor="mallory")
        assert (refused.value.code, refused.value.status) == ("not_granted", 403)
        await c.grant(sid, "auditor-1", actor=owner)
        assert (await c.read_record(sid, rid, actor="auditor-1"))["record_id"] == rid
        with pytest.raises(ApiError):
            await c.read_record(sid, rid, actor="mallory")  # a grant is per actor


@pytest.mark.spec("R5.1", "R4.4")
@pytest.mark.parametrize("fmt", ["openai_chat", "openai_responses", "anthropic_messages"])
async def test_prepare_renders_provider_ready_requests(services: Services, fmt: str) -> None:
    from tests.support.flows import PROFILE

    async with client(services) as c:
        session = await new_session(c, model_profile=PROFILE | {"provider_format": fmt})
        run = await c.start_run(session)
        await c.append_user(run, "read it", "q")
        await _round(c, run, "x", ToolStatus.ERROR)
        p = await c.prepare(run, render=True)
    req = p["provider"]["request"]
    assert p["provider"]["format"] == fmt
    text = json.dumps(req)
    assert "x-c" in text and "result of x" in text and "error" in text
    if fmt == "anthropic_messages":
        assert req["system"][0]["text"].startswith("You are a careful test agent.")
        assert [t["role"] for t in req["messages"]] == ["user", "assistant", "user"]
    elif fmt == "openai_chat":
        assert [m["role"] for m in req["messages"]] == ["system", "user", "assistant", "tool"]
    else:
        assert [i["type"] for i in req["input"]] == [
            "message",
            "message",
            "function_call",
            "function_call_output",
        ]
