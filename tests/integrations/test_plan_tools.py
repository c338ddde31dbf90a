"""The plan tools in the framework adapters (issue 24, R4.4): LangChain's ``write_todos``
(``TodoListMiddleware``) and our ``update_plan`` called by a model become the thread's
plan through ``AgentLoomMiddleware`` / ``AgentLoomSession``, through the real broker,
database and processor; the plan renders as its own block in the next prepared context,
and a retried append is no second plan version."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from agents import Agent, Runner
from langchain.agents import create_agent
from langchain.agents.middleware import TodoListMiddleware
from langchain_core.messages import AIMessage, HumanMessage

from schemas.errors import InvalidRequest
from services.integrations.binding import plan_of_call
from services.integrations.connection import AgentLoomConnection
from services.integrations.langchain import AgentLoomMiddleware
from services.integrations.openai_agents import AgentLoomSession, plan_tool, wait_committed
from services.sdk.client import ApiError, ContextClient, RunHandle
from tests.integrations.fake_agents_model import FakeModel
from tests.integrations.test_langchain import SMALL as LC_RELEASE
from tests.integrations.test_langchain import RecordingFakeModel
from tests.integrations.test_openai_agents import SMALL as AGENTS_RELEASE

TODOS = [
    {"content": "Read table t1", "status": "completed"},
    {"content": "Compare t1 with t2", "status": "in_progress"},
    {"content": "Write the answer", "status": "pending"},
]


def _plan_block(prepared: dict[str, Any]) -> str:
    blocks = [m for m in prepared["messages"] if m.get("block") == "plan"]
    assert len(blocks) == 1, [m.get("block") for m in prepared["messages"]]
    return str(blocks[0]["content"])


async def _prepared(c: ContextClient, run: RunHandle, *keys: str) -> dict[str, Any]:
    for key in keys:
        await wait_committed(c, run.session_id, key)
    return dict(await c.prepare(run))


# --- pure: the mapping of a call to a plan ---------------------------------------------


def test_write_todos_map_to_plan_items_with_ids_from_their_text() -> None:
    got = plan_of_call("write_todos", json.dumps({"todos": TODOS}))
    assert got is not None
    items, explanation = got
    assert [(i.text, i.status) for i in items] == [
        ("Read table t1", "done"),
        ("Compare t1 with t2", "in_progress"),
        ("Write the answer", "pending"),
    ]
    assert explanation is None
    # A step keeps its id when another is inserted before it; a repeated text is told apart.
    moved = plan_of_call(
        "write_todos",
        json.dumps({"todos": [{"content": "New first", "status": "pending"}, *TODOS, TODOS[2]]}),
    )
    assert moved is not None
    ids = [i.item_id for i in moved[0]]
    assert ids[1:4] == [i.item_id for i in items] and len(set(ids)) == 5
    assert ids[4] == ids[3] + "-2"


def test_update_plan_calls_and_other_tools() -> None:
    args = {"plan": [{"id": "a", "step": "Do a", "status": "done"}], "explanation": "why"}
    got = plan_of_call("update_plan", json.dumps(args))
    assert got is not None and got[0][0].item_id == "a" and got[1] == "why"
    assert plan_of_call("lookup", "{}") is None
    with pytest.raises(InvalidRequest):
        plan_of_call("write_todos", '{"todos": "none"}')
    with pytest.raises(InvalidRequest):
        plan_of_call("write_todos", "not json")


# --- LangChain: write_todos through the middleware --------------------------------------


@pytest.mark.integration
@pytest.mark.spec("R4.4")
async def test_a_langchain_write_todos_call_pins_the_plan_and_a_retry_is_no_new_version(
    connection: AgentLoomConnection,
) -> None:
    call = {
        "name": "write_todos",
        "args": {"todos": TODOS},
        "id": "call_todos1",
        "type": "tool_call",
    }
    model = RecordingFakeModel(
        messages=iter([AIMessage("", tool_calls=[call]), AIMessage("Planned.")])
    )
    model.requests = []
    middleware = AgentLoomMiddleware(
        f"lc-plan-{uuid.uuid4().hex[:8]}", connection=connection, release=LC_RELEASE
    )
    agent = create_agent(
        model, [], system_prompt="Plan.", middleware=[TodoListMiddleware(), middleware]
    )
    result = await agent.ainvoke({"messages": [HumanMessage("Compare t1 and t2.")]})
    assert result["messages"][-1].content == "Planned."
    assert result["todos"] == TODOS  # LangChain's own state is as it was

    async def check(c: ContextClient) -> dict[str, Any]:
        assert middleware._run is not None
        return await _prepared(c, middleware._run, "plan:call_todos1")

    prepared = await connection.run(check)
    block = _plan_block(prepared)
    assert block.startswith("[current plan")
    for line in ("[done] Read table t1", "[in_progress] Compare t1 with t2", "[pending] Write"):
        assert line in block, block
    assert prepared["dependency_versions"]["plan_version"] == 1
    assert prepared["frontier"]["plan"]["items"][0]["status"] == "done"
    # The model's second request already showed the plan it made.
    assert any("Compare t1 with t2" in str(m.content) for m in model.requests[-1])

    # A retried append of the same AI message (same id): no second plan version.
    message = next(m for m in result["messages"] if isinstance(m, AIMessage) and m.tool_calls)
    middleware._seen.discard(str(message.id))
    await connection.run(lambda c: middleware._locked(c, middleware._record, message))
    again = await connection.run(check)
    assert again["dependency_versions"]["plan_version"] == 1
    assert _plan_block(again) == block


# --- OpenAI Agents SDK: update_plan through the session ---------------------------------


@pytest.mark.integration
@pytest.mark.spec("R4.4")
async def test_an_agents_sdk_update_plan_call_pins_the_plan_in_the_session_items(
    connection: AgentLoomConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = AgentLoomSession(
        f"conv-plan-{uuid.uuid4().hex[:8]}", connection=connection, release=AGENTS_RELEASE
    )
    plan = {
        "plan": [
            {"id": "read", "step": "Read table t1", "status": "done"},
            {"id": "cmp", "step": "Compare t1 with t2", "status": "in_progress"},
        ],
        "explanation": "t1 read",
    }
    model = FakeModel()
    model.script([("call", "update_plan", plan), ("say", "Planned.")])
    agent = Agent(name="planner", instructions="Plan.", model=model, tools=[plan_tool()])
    result = await Runner.run(agent, "Compare t1 and t2.", session=session)
    assert result.final_output == "Planned."
    call_item = next(
        i for i in model.inputs[-1] if isinstance(i, dict) and i.get("type") == "function_call"
    )
    output = next(i for i in model.inputs[-1] if i.get("type") == "function_call_output")
    assert "Plan updated (2 steps)" in str(output["output"])

    async def check(c: ContextClient) -> dict[str, Any]:
        assert session._run is not None
        return await _prepared(c, session._run, f"plan:{call_item['call_id']}")

    prepared = await connection.run(check)
    block = _plan_block(prepared)
    assert "[done] Read table t1" in block and "[in_progress] Compare t1 with t2" in block
    assert prepared["dependency_versions"]["plan_version"] == 1
    items = await session.get_items()
    assert any("[in_progress] Compare t1 with t2" in json.dumps(i) for i in items), items

    # A batch whose plan publish lost its answer, retried by the SDK: one more version only.
    again = await _retried_plan_batch(session, monkeypatch)
    assert again["dependency_versions"]["plan_version"] == 2
    assert "[done] Compare t1 with t2" in _plan_block(again)


async def _retried_plan_batch(
    session: AgentLoomSession, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    args = {
        "plan": [
            {"id": "read", "step": "Read table t1", "status": "done"},
            {"id": "cmp", "step": "Compare t1 with t2", "status": "done"},
        ]
    }
    batch: list[Any] = [
        {
            "type": "function_call",
            "call_id": "call_p2",
            "name": "update_plan",
            "arguments": json.dumps(args),
        },
        {"type": "function_call_output", "call_id": "call_p2", "output": "Plan updated."},
    ]
    real = ContextClient.update_plan
    failed: list[str] = []

    async def flaky(self: ContextClient, *a: Any, **k: Any) -> Any:
        out = await real(self, *a, **k)
        if not failed:  # the broker's answer is lost after the write went through
            failed.append("once")
            raise ApiError.of(0, "timeout", "lost answer", True)
        return out

    monkeypatch.setattr(ContextClient, "update_plan", flaky)
    with pytest.raises(ApiError):
        await session.add_items(batch)
    await session.add_items(batch)  # the SDK retries the same write

    async def check(c: ContextClient) -> dict[str, Any]:
        assert session._run is not None
        return await _prepared(c, session._run, "plan:call_p2")

    return await session._conn.run(check)
