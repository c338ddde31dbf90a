"""LangChain v1 ``create_agent`` over AgentLoom Context (issue 15): an agent with
``AgentLoomMiddleware`` through the real broker, database and compaction service, with a
fake chat model that calls a tool and then answers, and keeps every request it receives
(R4.4, R5.1, R6.3)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import asyncpg
import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import tool

from services.integrations.connection import AgentLoomConnection
from services.integrations.langchain import AgentLoomMiddleware
from services.integrations.langchain_messages import pairs_intact
from tests.integration.test_compaction import settled

pytestmark = pytest.mark.integration

SMALL = {
    "agent_id": "langchain-test",
    "instructions": "You answer questions about tables.",
    "tool_catalog": [],
    "model_profile": {
        "name": "m-small-chat",
        "context_capacity": 3000,
        "output_reserve": 0,
        "safety_margin": 0,
        "provider_format": "openai_chat",
    },
    "context_policy": {"recent_complete_groups": 1, "compaction": {"user_turns": 1}},
}


class RecordingFakeModel(GenericFakeChatModel):
    """LangChain's fake chat model answering scripted messages; keeps every request."""

    requests: list[list[BaseMessage]] = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.requests.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


@tool
def lookup(table: str) -> str:
    """Read a table."""
    return f"{table}: " + " ".join(f"row{i}={i * 7}" for i in range(60))


def _script(turns: int) -> Iterator[AIMessage]:
    for q in range(turns):
        call = {
            "name": "lookup",
            "args": {"table": f"t{q}"},
            "id": f"call_{q}",
            "type": "tool_call",
        }
        yield AIMessage("", tool_calls=[call])
        yield AIMessage(f"t{q} has 60 rows.")


def _questions(request: Sequence[BaseMessage]) -> list[str]:
    return [str(m.content) for m in request if isinstance(m, HumanMessage)]


@pytest.mark.spec("R5.1", "R4.4", "R6.3")
async def test_a_create_agent_loop_is_compacted_within_budget_with_pairs_intact(
    connection: AgentLoomConnection, db: asyncpg.Pool
) -> None:
    turns = 6
    model = RecordingFakeModel(messages=_script(turns))
    model.requests = []
    sid = f"lc-{uuid.uuid4().hex[:10]}"
    middleware = AgentLoomMiddleware(sid, connection=connection, release=SMALL)
    agent = create_agent(model, [lookup], system_prompt="Answer.", middleware=[middleware])
    seen_summary = False
    for q in range(turns):
        question = f"Question {q}: what is in table t{q}?"
        before = len(model.requests)
        # No checkpointer: the agent's state holds this question only, the history is ours.
        result = await agent.ainvoke({"messages": [HumanMessage(question)]})
        assert result["messages"][-1].content == f"t{q} has 60 rows."
        sent = model.requests[before:]
        assert len(sent) == 2  # the tool call, then the answer
        for request in sent:
            assert pairs_intact(request), request
            assert _questions(request)[-1] == question  # verbatim, the latest user text
            assert str(request[0].content) == "Answer."  # the agent's own system prompt
        assert isinstance(sent[0][-1], HumanMessage) and sent[0][-1].content == question
        seen_summary = seen_summary or any(
            str(m.content).startswith("[history summary") for m in sent[0]
        )
        await settled(db, sid, at_least=0)
    assert seen_summary, "no summary appeared in six over-budget turns"
    assert len(model.requests[-1]) < 4 * turns  # not the whole history

    async def budget(c: Any) -> dict[str, Any]:
        assert middleware._run is not None
        return dict((await c.prepare(middleware._run))["budget"])

    b = await connection.run(budget)
    assert b["estimated_input"] <= b["input_budget"]
    jobs = await db.fetch("SELECT status FROM compaction_jobs WHERE session_id=$1", sid)
    assert any(j["status"] == "committed" for j in jobs), [dict(j) for j in jobs]
    calls = await db.fetch(
        "SELECT status, budget FROM model_calls WHERE session_id=$1 ORDER BY created_at", sid
    )
    assert len(calls) == 2 * turns  # every request went through the gateway's check
