"""The OpenAI Agents SDK over AgentLoom Context (issue 15): ``Runner.run`` with an
``AgentLoomSession`` through the real broker, database and compaction service, with a
fake model that calls a tool and then answers (R4.4, R5.1, R6, R7, R19)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from agents import Agent, Runner, function_tool

from schemas.contracts import Authority, Content, RecordKind, RetractionPayload
from services.integrations.connection import AgentLoomConnection
from services.integrations.openai_agents import AgentLoomSession, wait_committed
from services.sdk.client import ApiError, ContextClient
from tests.integration.test_compaction import settled
from tests.integration.test_stuck_sessions import until
from tests.integrations.fake_agents_model import FakeModel

pytestmark = pytest.mark.integration

# A question (user input) a committed summary of session $1 covers.
COVERED_QUESTION = (
    "SELECT r.record_id FROM records r JOIN summary_revisions s"
    " ON s.session_id = r.session_id AND r.record_id = ANY(s.covered_record_ids)"
    " WHERE r.session_id=$1 AND s.status='committed' AND r.kind='user_input' LIMIT 1"
)

SMALL = {
    "agent_id": "agents-sdk-test",
    "instructions": "You answer questions about tables.",
    "tool_catalog": [],
    "model_profile": {
        "name": "m-small",
        "context_capacity": 3000,
        "output_reserve": 0,
        "safety_margin": 0,
        "provider_format": "openai_responses",
    },
    "context_policy": {"recent_complete_groups": 1, "compaction": {"user_turns": 1}},
}


@pytest.fixture
async def session(connection: AgentLoomConnection) -> AsyncIterator[AgentLoomSession]:
    yield AgentLoomSession(f"conv-{uuid.uuid4().hex[:10]}", connection=connection, release=SMALL)


@function_tool
def lookup(table: str) -> str:
    """Read a table."""
    return f"{table}: " + " ".join(f"row{i}={i * 7}" for i in range(60))


def pairs_intact(items: list[Any]) -> bool:
    """Every tool output has its call before it, every call its output after it."""
    calls: list[str] = []
    for i in items:
        if i.get("type") == "function_call":
            calls.append(i["call_id"])
        elif i.get("type") == "function_call_output" and i["call_id"] not in calls:
            return False
    outputs = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
    return set(calls) <= outputs


@pytest.mark.spec("R4.4", "R5.1", "R6.1", "R7.1", "R19")
async def test_a_runner_conversation_is_compacted_within_budget_with_pairs_intact(
    session: AgentLoomSession, db: asyncpg.Pool
) -> None:
    model = FakeModel()
    agent = Agent(name="tables", instructions="Answer.", model=model, tools=[lookup])
    seen_summary = False
    for q in range(6):
        question = f"Question {q}: what is in table t{q}?"
        model.script([("call", "lookup", {"table": f"t{q}"}), ("say", f"t{q} has 60 rows.")])
        result = await Runner.run(agent, question, session=session)
        assert result.final_output == f"t{q} has 60 rows."
        sent = model.inputs[-2]  # the first model call of this turn: history + question
        assert sent[-1] == {"role": "user", "content": question}  # verbatim, last
        history = await session.get_items()
        assert pairs_intact(history), history
        assert pairs_intact(model.inputs[-1])
        seen_summary = seen_summary or str(history[0].get("content")).startswith("[history summary")
        await settled(db, session._session["session_id"], at_least=0)  # type: ignore[index]
    assert seen_summary, "no summary appeared in six over-budget turns"
    prepared_budget = await _budget(session)
    assert prepared_budget["estimated_input"] <= prepared_budget["input_budget"]
    jobs = await db.fetch(
        "SELECT status FROM compaction_jobs WHERE session_id=$1",
        session._session["session_id"],  # type: ignore[index]
    )
    assert any(j["status"] == "committed" for j in jobs), [dict(j) for j in jobs]


async def _budget(session: AgentLoomSession) -> dict[str, Any]:
    async def go(c: Any) -> dict[str, Any]:
        prepared = await c.prepare(session._run)
        return dict(prepared["budget"])

    return await session._conn.run(go)


@pytest.mark.spec("R2.1", "R16")
async def test_items_round_trip_and_a_retried_batch_is_not_a_duplicate(
    session: AgentLoomSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    items: list[Any] = [
        {"role": "user", "content": "Read t1"},
        {"type": "function_call", "call_id": "call_a1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_a1", "output": "t1: rows"},
        {"role": "assistant", "content": "t1 has rows."},
    ]
    real = ContextClient.append_tool_outcome
    failed: list[str] = []

    async def flaky(self: ContextClient, run: Any, call_id: str, *a: Any, **k: Any) -> Any:
        if not failed:  # the broker's answer is lost after the write went through
            failed.append(call_id)
            await real(self, run, call_id, *a, **k)
            raise ApiError.of(0, "timeout", "lost answer", True)
        return await real(self, run, call_id, *a, **k)

    monkeypatch.setattr(ContextClient, "append_tool_outcome", flaky)
    with pytest.raises(ApiError):
        await session.add_items(items)
    await session.add_items(items)  # the SDK retries the same write
    got = await session.get_items()
    assert got == [{"role": "user", "content": "Read t1"}, *items[1:]], got
    assert got[0] == {"role": "user", "content": "Read t1"}
    assert got[1]["call_id"] == "call_a1" and got[2]["call_id"] == "call_a1"
    assert await session.get_items(limit=2) == got[-2:] or pairs_intact(
        await session.get_items(limit=2)
    )
    await session.clear_session()
    assert await session.get_items() == []


# --- pop_item: a retraction (issue 15) ------------------------------------------------


def _sid(session: AgentLoomSession) -> str:
    assert session._session is not None
    return str(session._session["session_id"])


async def _retracted(db: asyncpg.Pool, sid: str) -> list[str]:
    """The targets of the session's retractions, oldest first."""
    rows = await db.fetch(
        "SELECT operation_id FROM records WHERE session_id=$1 AND kind='record_retracted'"
        " ORDER BY session_sequence",
        sid,
    )
    return [r["operation_id"] for r in rows]


async def _read(session: AgentLoomSession, record_id: str) -> dict[str, Any]:
    async def go(c: ContextClient) -> dict[str, Any]:
        return await c.read_record(_sid(session), record_id)

    return await session._conn.run(go)


async def _covered_question(db: asyncpg.Pool, sid: str, within_s: float) -> str | None:
    """A question (user input) a committed summary covers, once there is one within
    ``within_s``; None if there is none by then."""
    try:
        row = await until(db, COVERED_QUESTION, sid, timeout=within_s)
    except AssertionError:  # ``until``'s "nothing ... in" once ``within_s`` passed
        return None
    return str(row["record_id"])


async def _retract(session: AgentLoomSession, target: str, key: str) -> None:
    """A retraction published directly, as a runtime would, and its outcome awaited."""

    async def go(c: ContextClient) -> None:
        assert session._run is not None
        payload = RetractionPayload(target, "test")
        ev = c._event(
            session._run, RecordKind.RECORD_RETRACTED, Authority.HOST, Content.text(""),
            payload, key, operation_id=target,
        )  # fmt: skip
        await c.append(ev)
        await wait_committed(c, _sid(session), key)

    await session._conn.run(go)


@pytest.mark.spec("R3.1", "R11.8", "R16")
async def test_pop_item_retracts_the_newest_item_which_stays_readable_by_id(
    session: AgentLoomSession, db: asyncpg.Pool
) -> None:
    assert await session.pop_item() is None  # nothing yet: the SDK's contract
    await session.add_items(
        [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there!"},
            {"role": "user", "content": "How are you?"},
        ]
    )
    assert len(await session.get_items()) == 3
    popped = await session.pop_item()
    assert popped == {"role": "user", "content": "How are you?"}
    assert await session.get_items() == [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
    ]
    [target] = await _retracted(db, _sid(session))
    back = await _read(session, target)  # R11.8: the source stays readable by id
    assert back["content"] == "How are you?" and back["kind"] == "user_input"
    assert back["retracted"] is True and back["retracted_by"]
    # R3.1: retracting it again (a retried pop: the key derives from the target) is a
    # duplicate — answered as committed, no second retraction.
    await _retract(session, target, f"retract:{target}")
    assert await _retracted(db, _sid(session)) == [target]
    assert await session.pop_item() == {"role": "assistant", "content": "Hi there!"}
    assert await session.pop_item() == {"role": "user", "content": "Hello"}
    assert await session.pop_item() is None
    assert await session.get_items() == []
    assert len(await _retracted(db, _sid(session))) == 3
    await session.add_items([{"role": "user", "content": "How are you?"}])  # said again
    assert await session.get_items() == [{"role": "user", "content": "How are you?"}]


@pytest.mark.spec("R3.1")
async def test_refused_retractions_name_their_reason(
    session: AgentLoomSession, db: asyncpg.Pool
) -> None:
    await session.add_items([{"role": "user", "content": "Hello"}])
    await session.pop_item()
    [target] = await _retracted(db, _sid(session))
    retraction_id = await db.fetchval(
        "SELECT record_id FROM records WHERE session_id=$1 AND kind='record_retracted'",
        _sid(session),
    )
    with pytest.raises(ApiError) as unknown:
        await _retract(session, "rec_" + "f" * 32, "unknown")
    assert unknown.value.code == "retraction_target_unknown"
    with pytest.raises(ApiError) as of_retraction:
        await _retract(session, retraction_id, "of-retraction")
    assert of_retraction.value.code == "retraction_of_retraction"
    outcomes = await db.fetch(
        "SELECT event_key, outcome FROM event_outcomes WHERE session_id=$1 ORDER BY event_key",
        _sid(session),
    )
    assert [(o["event_key"], o["outcome"]) for o in outcomes] == [
        ("of-retraction", "rejected"),
        ("unknown", "dead_letter"),
    ]
    assert await _retracted(db, _sid(session)) == [target]


@pytest.mark.spec("R11.8", "R19")
async def test_pop_after_compaction_and_a_summarized_record_is_not_retracted(
    session: AgentLoomSession, db: asyncpg.Pool
) -> None:
    model = FakeModel()
    agent = Agent(name="tables", instructions="Answer.", model=model, tools=[lookup])

    async def turn(q: int) -> None:
        model.script([("call", "lookup", {"table": f"t{q}"}), ("say", f"t{q} has 60 rows.")])
        await Runner.run(agent, f"Question {q}: what is in table t{q}?", session=session)
        await settled(db, _sid(session), at_least=0)

    # Turns until a committed summary covers a question. The first job of a run leaves
    # its question out (the current task is pinned); the roll-up that covers it next may
    # be refused (its summary no shorter than what it covers), and the turns' prepares
    # while it runs start no other job: how many turns that takes is the machine's
    # timing. The last turn's own prepare may start the covering job, whose trigger
    # reaches the compaction service after the turn ends: it is waited for a while.
    question, q = None, 0
    while question is None:
        assert q < 8, "no question summarized after 8 turns"
        await turn(q)
        q += 1
        if q >= 3:
            question = await _covered_question(db, _sid(session), within_s=10)
    last = q - 1
    await settled(db, _sid(session), at_least=0)
    assert str((await session.get_items())[0].get("content")).startswith("[history summary")
    # The newest item is never summarized: it pops like any other.
    assert await session.pop_item() == {"role": "assistant", "content": f"t{last} has 60 rows."}
    [popped] = await _retracted(db, _sid(session))
    items = await session.get_items()
    assert all(i.get("content") != f"t{last} has 60 rows." for i in items), items
    # A summarized record is refused: its summary would still restate it.
    with pytest.raises(ApiError) as refused:
        await _retract(session, question, "summarized")
    assert refused.value.code == "retraction_of_summarized_record"
    assert (await _read(session, question))["retracted"] is False
    # Later compactions never summarize the retracted record (the view epoch changed, so
    # cached thread views were rebuilt without it).
    before = await db.fetchval(
        "SELECT count(*) FROM summary_revisions WHERE session_id=$1 AND status='committed'",
        _sid(session),
    )
    for later in range(q, q + 2):
        await turn(later)
    await until(  # the last turn's job may be inserted after the turn ends (above)
        db,
        "SELECT count(*) FROM summary_revisions WHERE session_id=$1 AND status='committed'"
        " HAVING count(*) > $2",
        _sid(session),
        before,
    )
    await settled(db, _sid(session), at_least=0)
    rows = await db.fetch(
        "SELECT covered_record_ids FROM summary_revisions WHERE session_id=$1"
        " AND status='committed'",
        _sid(session),
    )
    assert len(rows) > before, "no compaction after the pop"
    assert all(popped not in r["covered_record_ids"] for r in rows)
    back = await _read(session, popped)
    assert back["content"] == f"t{last} has 60 rows." and back["retracted"] is True
