"""Serial runs, strictly (SPEC R1.2, R1.3, R8.2), through the real broker and database:
only the active run takes appends; resume and finish keys come from the run's durable
lifecycle counters, so a restarted runtime is never silently dropped; a refused resume
is reported with its code."""

from __future__ import annotations

import asyncpg
import pytest

from domain.planning.state import record_id_for
from schemas.contracts import ChildResultPayload, ToolStatus
from schemas.wire import decode_dead_letter
from services.sdk.client import ApiError, ContextClient, RunHandle
from tests.support.flows import client, new_session, read_topic, wait_committed
from tests.support.services import Services

pytestmark = [pytest.mark.integration, pytest.mark.spec("R1.2", "R1.3", "R8.2")]


async def _counters(db: asyncpg.Pool, sid: str) -> dict[str, object]:
    row = await db.fetchrow(
        "SELECT next_session_sequence, active_run_id, revision, user_turns, model_steps"
        " FROM sessions WHERE session_id=$1",
        sid,
    )
    assert row is not None
    return dict(row)


async def _outcomes(db: asyncpg.Pool, sid: str, keys: list[str]) -> dict[str, tuple[str, str]]:
    rows = await db.fetch(
        "SELECT event_key, outcome, code FROM event_outcomes WHERE session_id=$1"
        " AND event_key = ANY($2::text[])",
        sid,
        keys,
    )
    return {r["event_key"]: (r["outcome"], r["code"]) for r in rows}


async def _stored(db: asyncpg.Pool, sid: str, keys: list[str]) -> list[str]:
    rows = await db.fetch(
        "SELECT event_key FROM records WHERE session_id=$1 AND event_key = ANY($2::text[])",
        sid,
        keys,
    )
    return sorted(r["event_key"] for r in rows)


async def _run(db: asyncpg.Pool, sid: str, run_id: str) -> dict[str, object]:
    row = await db.fetchrow(
        "SELECT status, resumes, ends, refused_resumes FROM runs WHERE session_id=$1 AND run_id=$2",
        sid,
        run_id,
    )
    assert row is not None
    return dict(row)


async def _dead_letters(services: Services, sid: str) -> dict[str, str]:
    letters = [
        decode_dead_letter(v)
        for _, v in await read_topic(
            services.stack.kafka_bootstrap,
            services.env("ALC_TOPIC_DEAD_LETTER"),
            want=100_000,
            timeout=3,
        )
    ]
    return {d.event_key or "": d.reason_code for d in letters if d.session_id == sid}


async def _ask(c: ContextClient, run: RunHandle, tag: str) -> None:
    await c.append_user(run, f"question {tag}", f"q-{tag}")
    await c.append_model_result(run, f"answer {tag}", f"m-{tag}")


async def test_an_append_to_a_finished_run_is_dead_lettered_never_counted_nor_readable(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        session = await new_session(c)
        sid = session["session_id"]
        a = await c.start_run(session)
        await _ask(c, a, "a")
        await c.finish_run(a)
        before = await _counters(db, sid)
        await c.append_user(a, "one more thing", "late-q")
        await c.append_user(a, "and this", "late-s", supplement=True)
        await c.append_model_result(a, "late answer", "late-m", [("late-c", "search", "{}")])
        p, o = await c.append_tool_outcome(a, "late-c", "search", "late result")
        await wait_committed(db, services, {p: o})
        late = ["late-q", "late-s", "model:late-m", "tool:late-c"]
        assert await _counters(db, sid) == before  # no record, no step, no sequence (R8.2)
        assert await _stored(db, sid, late) == []
        assert await _outcomes(db, sid, late) == {
            k: ("dead_letter", "run_not_active") for k in late
        }
        letters = await _dead_letters(services, sid)
        assert {k: letters.get(k) for k in late} == {k: "run_not_active" for k in late}
        with pytest.raises(ApiError) as missing:
            await c.read_record(sid, record_id_for(session["space_id"], sid, "model:late-m"))
        assert missing.value.code == "not_found"
        # a new question is not held up by the refused appends
        b = await c.start_run(session)
        await c.append_user(b, "next question", "q-b")
        view = await c.prepare(b)
    contents = [m["content"] for m in view["messages"]]
    assert "late answer" not in contents and "one more thing" not in contents
    assert contents[-1] == "next question"


async def test_a_cancelled_run_refuses_appends_while_the_active_run_and_its_children_work(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        session = await new_session(c)
        sid = session["session_id"]
        a = await c.start_run(session)
        await _ask(c, a, "a")
        await c.append_model_result(a, "a slow call", "slow-m", [("slow-c", "crawl", "{}")])
        await c.finish_run(a, cancelled=True, reason="user stopped")
        b = await c.start_run(session)
        await c.append_user(b, "question b", "q-b")
        before = await _counters(db, sid)
        # the cancelled run's runtime did not notice: its late work arrives now
        await c.append_tool_outcome(a, "slow-c", "crawl", "crawled", ToolStatus.OK)
        await c.append_model_result(a, "late step", "a-late")
        a_child = await c.export_for_child(a, "a-helper", [])
        await c.append_model_result(a_child, "child of a cancelled run", "a-child-m")
        await c.accept_child_result(
            a, ChildResultPayload("a-helper", "a-child-op", "ok", "done", 1), "late child"
        )
        # the active run and its child thread keep working
        await c.append_model_result(b, "b step", "b-m", [("b-c", "search", "{}")])
        await c.append_tool_outcome(b, "b-c", "search", "b result")
        b_child = await c.export_for_child(b, "b-helper", [])
        await c.append_model_result(b_child, "child step", "b-child-m")
        await c.accept_child_result(
            b, ChildResultPayload("b-helper", "b-child-op", "ok", "done", 1), "child says ok"
        )
        view = await c.prepare(b)
        child_view = await c.prepare(b_child)
        refused = [
            "tool:slow-c",
            "model:a-late",
            "child_transfer:a-helper",
            "model:a-child-m",
            "child:a-child-op",
        ]
        assert await _stored(db, sid, refused) == []
        assert await _outcomes(db, sid, refused) == {
            k: ("dead_letter", "run_not_active") for k in refused
        }
        after = await _counters(db, sid)
        accepted = [
            "model:b-m",
            "tool:b-c",
            "child_transfer:b-helper",
            "model:b-child-m",
            "child:b-child-op",
        ]
        assert await _stored(db, sid, accepted) == sorted(accepted)
        assert await _run(db, sid, a.run_id) == {
            "status": "cancelled",
            "resumes": 0,
            "ends": 1,
            "refused_resumes": 0,
        }
    assert after["model_steps"] == before["model_steps"] + 1  # b's step only (R8.2, R8.3)
    assert after["user_turns"] == before["user_turns"]
    assert after["active_run_id"] == b.run_id
    contents = [m["content"] for m in view["messages"]]
    assert "late step" not in contents and "crawled" not in contents
    assert "b step" in contents and "b result" in contents
    assert any("child says ok" in text for text in contents)
    assert [m["content"] for m in child_view["messages"]][-1] == "child step"


async def test_a_resume_after_a_runtime_restart_is_not_dropped_and_can_finish_again(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as first:
        session = await new_session(first)
        sid = session["session_id"]
        a = await first.start_run(session)
        await _ask(first, a, "a")
        await first.finish_run(a)
        b = await first.start_run(session)
        await _ask(first, b, "b")
        await first.finish_run(b)
        await first.resume_run(a, reason="follow-up")
        await _ask(first, a, "a2")
        await first.finish_run(a)
    # The runtime restarts: a new client with no memory of earlier resumes, holding only
    # the run's identity (as a runtime would persist it).
    saved = RunHandle(a.session_id, a.run_id, a.instance_id, a.space_id, a.actor_id, a.snapshot)
    async with client(services) as second:
        await second.resume_run(saved, reason="after restart")
        assert (await _run(db, sid, a.run_id))["status"] == "active"
        await _ask(second, saved, "a3")
        view = await second.prepare(saved)
        await second.finish_run(saved)
        after_finish = await _run(db, sid, a.run_id)
        c = await second.start_run(session)  # nothing left active
    resumes = await db.fetchval(
        "SELECT count(*) FROM records WHERE session_id=$1 AND run_id=$2 AND kind='run_resumed'",
        sid,
        a.run_id,
    )
    assert resumes == 2
    assert after_finish == {"status": "finished", "resumes": 2, "ends": 3, "refused_resumes": 0}
    contents = [m["content"] for m in view["messages"]]
    assert contents[-2:] == ["question a3", "answer a3"]
    assert "question b" not in contents  # still A's own snapshot (R2.5)
    assert c.run_id not in (a.run_id, b.run_id)


async def test_a_retried_resume_is_idempotent(services: Services, db: asyncpg.Pool) -> None:
    async with client(services) as c:
        session = await new_session(c)
        sid = session["session_id"]
        a = await c.start_run(session)
        await _ask(c, a, "a")
        await c.finish_run(a)
        await c.resume_run(a)
        # The response was lost; the runtime (or a restarted one) asks again.
        await c.resume_run(a)
        async with client(services) as restarted:
            await restarted.resume_run(a)
        # A retry naming its key explicitly is a duplicate as well.
        await c.finish_run(a)
        await c.resume_run(a, event_key="resume-after-review")
        await c.resume_run(a, event_key="resume-after-review")
        keys = await db.fetch(
            "SELECT event_key FROM records WHERE session_id=$1 AND kind='run_resumed'"
            " ORDER BY session_sequence",
            sid,
        )
        state = await _run(db, sid, a.run_id)
        await c.finish_run(a)
        await c.finish_run(a)  # a retried finish: a duplicate, not an error
        ends = await db.fetchval(
            "SELECT count(*) FROM records WHERE session_id=$1 AND kind='run_finished'", sid
        )
    assert [r["event_key"] for r in keys] == [f"run_resumed:{a.run_id}:1", "resume-after-review"]
    assert state == {"status": "active", "resumes": 2, "ends": 2, "refused_resumes": 0}
    assert ends == 3


async def test_a_refused_resume_raises_with_its_code_and_does_not_block_a_later_one(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        session = await new_session(c)
        sid = session["session_id"]
        a = await c.start_run(session)
        await _ask(c, a, "a")
        await c.finish_run(a)
        b = await c.start_run(session)
        with pytest.raises(ApiError) as refused:
            await c.resume_run(a)
        assert (refused.value.code, refused.value.status) == ("run_active", 409)
        assert b.run_id in refused.value.message
        with pytest.raises(ApiError) as again:  # asking again while b runs: refused again
            await c.resume_run(a)
        assert again.value.code == "run_active"
        assert (await _run(db, sid, a.run_id))["status"] == "finished"
        assert (await _counters(db, sid))["active_run_id"] == b.run_id
        await c.finish_run(b)
        await c.resume_run(a)  # once b is done, the same request succeeds
        assert await _run(db, sid, a.run_id) == {
            "status": "active",
            "resumes": 1,
            "ends": 1,
            "refused_resumes": 2,
        }
        await c.finish_run(a)
        with pytest.raises(ApiError) as ended:
            await c.finish_run(a, cancelled=True)  # it already finished
        assert (ended.value.code, ended.value.status) == ("run_not_active", 409)
        with pytest.raises(ApiError) as unknown:
            await c.resume_run(
                RunHandle(sid, "run-never", "run-never.main", a.space_id, a.actor_id, {})
            )
        assert unknown.value.code == "not_found"
