"""The decision and question tools in the framework adapters (issue 36): a model calling
``record_decision``, ``open_question`` and ``close_question`` through
``AgentLoomMiddleware(record_tools=True)`` / ``AgentLoomSession`` with ``authored_tools()``
makes the model's decision and question records (keys from the call ids: a retried
append is no second record), through the real broker, database and processor; the
inspector's read model lists them, the question closed with its answer."""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg
import pytest
from agents import Agent, Runner
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from services.integrations import authored_tools as at
from services.integrations.connection import AgentLoomConnection
from services.integrations.langchain import AgentLoomMiddleware
from services.integrations.langchain import authored_tools as lc_tools
from services.integrations.openai_agents import AgentLoomSession, wait_committed
from services.integrations.openai_agents import authored_tools as agents_tools
from services.sdk.client import ContextClient
from storage.records.authored import Authored, session_authored
from tests.integrations.fake_agents_model import FakeModel
from tests.integrations.test_langchain import SMALL as LC_RELEASE
from tests.integrations.test_langchain import RecordingFakeModel
from tests.integrations.test_openai_agents import SMALL as AGENTS_RELEASE

# --- pure: the calls, their checks and the tools' answers -------------------------------


def test_calls_map_to_records_and_bad_arguments_are_told_to_the_model() -> None:
    got = at.authored_of_call("record_decision", '{"decision": "Use Avro.", "reason": "schemas"}')
    assert got == at.AuthoredCall("record_decision", "Use Avro.", "schemas")
    assert at.authored_of_call("open_question", '{"question": "谁来审查?"}') == at.AuthoredCall(
        "open_question", "谁来审查?", None
    )
    closing = at.authored_of_call("close_question", '{"question_key": " question:c1 "}')
    assert closing == at.AuthoredCall("close_question", "question:c1", None)
    assert at.authored_of_call("update_plan", "{}") is None
    for name, args in [
        ("record_decision", "{}"),
        ("record_decision", '{"decision": "  "}'),
        ("record_decision", json.dumps({"decision": "x" * 5000})),
        ("open_question", "not json"),
        ("close_question", '{"question_key": "q", "answer": 3}'),
        ("close_question", "[]"),
    ]:
        assert at.tool_answer(name, args, "c9").startswith("not recorded:"), (name, args)
    assert at.tool_answer("open_question", '{"question": "Q?"}', "c9") == (
        "Question recorded as open; its key is question:c9."
    )


def test_the_tools_are_offered_with_the_shared_schemas() -> None:
    for name, spec in at.TOOLS.items():
        assert spec["name"] == name and spec["parameters"]["required"]
    lc = {t.name: t for t in lc_tools()}
    assert set(lc) == set(at.TOOLS)
    assert set(lc["close_question"].args) == {"question_key", "answer"}  # the id is injected
    answer = lc["open_question"].invoke(
        {"type": "tool_call", "name": "open_question", "args": {"question": "Q?"}, "id": "c1"}
    )
    assert isinstance(answer, ToolMessage) and "question:c1" in str(answer.content)
    assert AgentLoomMiddleware("s", connection=_unused(), record_tools=True).tools
    assert [t.name for t in agents_tools()] == list(at.TOOLS)


def _unused() -> Any:
    class Unused:  # the middleware only touches its connection when it runs
        space_id = "space-1"

    return Unused()


async def _authored(db_dsn: str, session_id: str) -> Authored:
    conn = await asyncpg.connect(db_dsn)
    try:
        return await session_authored(conn, session_id)
    finally:
        await conn.close()


# --- LangChain ---------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.spec("R11.7", "R16")
async def test_a_langchain_model_records_decisions_and_questions_through_its_tools(
    connection: AgentLoomConnection, pg_dsn: str
) -> None:
    def call(name: str, args: dict[str, Any], cid: str) -> dict[str, Any]:
        return {"name": name, "args": args, "id": cid, "type": "tool_call"}

    decide = call("record_decision", {"decision": "Use Avro.", "reason": "typed"}, "lc_d1")
    ask = call("open_question", {"question": "Which topic name?"}, "lc_q1")
    answer = {"question_key": "question:lc_q1", "answer": "ctx.records"}
    close = call("close_question", answer, "lc_c1")
    script = [AIMessage("", tool_calls=[decide, ask]), AIMessage("", tool_calls=[close])]
    model = RecordingFakeModel(messages=iter([*script, AIMessage("Recorded.")]))
    model.requests = []
    middleware = AgentLoomMiddleware(
        f"lc-auth-{uuid.uuid4().hex[:8]}",
        connection=connection,
        release=LC_RELEASE,
        record_tools=True,
    )
    agent = create_agent(model, [], system_prompt="Record.", middleware=[middleware])
    result = await agent.ainvoke({"messages": [HumanMessage("Pick a format.")]})
    assert result["messages"][-1].content == "Recorded."
    answers = [m.content for m in result["messages"] if isinstance(m, ToolMessage)]
    assert "Decision recorded." in answers
    assert any("question:lc_q1" in str(a) for a in answers)

    async def check(c: ContextClient) -> str:
        assert middleware._session is not None
        sid = str(middleware._session["session_id"])
        for key in ("decision:lc_d1", "question:lc_q1", "close:question:lc_q1"):
            await wait_committed(c, sid, key)
        return sid

    sid = await connection.run(check)
    authored = await _authored(pg_dsn, sid)
    assert [(d.text, d.reason, d.authority) for d in authored.decisions] == [
        ("Use Avro.", "typed", "model")
    ]
    assert [(q.key, q.text, q.status, q.answer) for q in authored.questions] == [
        ("question:lc_q1", "Which topic name?", "closed", "ctx.records")
    ]


# --- OpenAI Agents SDK -------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.spec("R11.7", "R16")
async def test_an_agents_sdk_model_records_decisions_and_questions_and_a_retry_is_no_second(
    connection: AgentLoomConnection, pg_dsn: str
) -> None:
    session = AgentLoomSession(
        f"conv-auth-{uuid.uuid4().hex[:8]}", connection=connection, release=AGENTS_RELEASE
    )
    model = FakeModel()
    model.script(
        [
            ("call", "record_decision", {"decision": "Partition by session."}),
            ("call", "open_question", {"question": "Wie viele Partitionen?"}),
            ("say", "Noted."),
        ]
    )
    tools: list[Any] = [*agents_tools()]
    agent = Agent(name="recorder", instructions="Record.", model=model, tools=tools)
    result = await Runner.run(agent, "Plan the topic.", session=session)
    assert result.final_output == "Noted."
    calls = [
        i for i in model.inputs[-1] if isinstance(i, dict) and i.get("type") == "function_call"
    ]
    outputs = [
        str(i["output"]) for i in model.inputs[-1] if i.get("type") == "function_call_output"
    ]
    opened = next(c for c in calls if c["name"] == "open_question")
    assert f"its key is question:{opened['call_id']}" in " ".join(outputs)

    async def check(c: ContextClient) -> str:
        assert session._session is not None
        sid = str(session._session["session_id"])
        for item in calls:
            prefix = "decision" if item["name"] == "record_decision" else "question"
            await wait_committed(c, sid, f"{prefix}:{item['call_id']}")
        return sid

    sid = await connection.run(check)
    # The calls published again (a retried append): no second record.
    again = [(str(i["call_id"]), str(i["name"]), str(i["arguments"])) for i in calls]

    async def republish(c: ContextClient) -> None:
        assert session._run is not None
        await at.publish_authored(c, session._run, again)

    await connection.run(republish)
    await session.get_items()  # a prepare after the appends: read-your-writes
    authored = await _authored(pg_dsn, sid)
    assert [(d.text, d.authority) for d in authored.decisions] == [
        ("Partition by session.", "model")
    ]
    assert [(q.text, q.status) for q in authored.questions] == [("Wie viele Partitionen?", "open")]
