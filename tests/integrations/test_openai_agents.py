"""The OpenAI Agents SDK over AgentLoom Context (issue 15): ``Runner.run`` with an
``AgentLoomSession`` through the real broker, database and compaction service, with a
fake model that calls a tool and then answers (R4.4, R5.1, R6, R7, R19)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
from agents import Agent, Runner, function_tool

from services.integrations.connection import AgentLoomConnection
from services.integrations.openai_agents import AgentLoomSession
from services.sdk.client import ApiError, ContextClient
from tests.integration.test_compaction import settled
from tests.integrations.fake_agents_model import FakeModel
from tests.support.services import TEST_SPACE, Services

pytestmark = pytest.mark.integration

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


@pytest.fixture(scope="module")
def connection(services: Services) -> Iterator[AgentLoomConnection]:
    conn = AgentLoomConnection(
        services.stack.kafka_bootstrap,
        services.prepare_url,
        services.api_key,
        services.env("ALC_TOPIC_RECORDS"),
        space_id=TEST_SPACE,
    )
    yield conn
    conn.close()


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
    with pytest.raises(NotImplementedError, match="retraction"):
        await session.pop_item()
    await session.clear_session()
    assert await session.get_items() == []
