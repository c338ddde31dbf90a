"""A LangChain conversation id is per space (issue 25, finding 4): the middleware uses the
framework's conversation id as the session's id, and another space that has the same id
is another conversation — neither blocks nor sees the other."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from services.integrations.langchain import AgentLoomMiddleware
from tests.integrations.test_langchain import SMALL, RecordingFakeModel
from tests.support.harness import connection
from tests.support.services import Services

pytestmark = pytest.mark.integration


def _said(request: Sequence[BaseMessage]) -> list[str]:
    return [str(m.content) for m in request if isinstance(m, HumanMessage)]


@pytest.mark.spec("R16", "R15.4")
async def test_a_langchain_conversation_id_is_per_space(services: Services) -> None:
    space_b = f"space-b-{uuid.uuid4().hex[:6]}"
    key_b = (await services.new_key(space_b)).key
    conv = f"conv-{uuid.uuid4().hex[:8]}"
    conn_b = connection(services, key_b, space_b)
    conn_a = connection(services)
    try:
        model_b = RecordingFakeModel(messages=iter([AIMessage("B's answer.")]))
        model_a = RecordingFakeModel(messages=iter([AIMessage("A 1."), AIMessage("A 2.")]))
        theirs = AgentLoomMiddleware(conv, connection=conn_b, release=SMALL)
        mine = AgentLoomMiddleware(conv, connection=conn_a, release=SMALL)
        agent_b = create_agent(model_b, [], system_prompt="Answer.", middleware=[theirs])
        agent_a = create_agent(model_a, [], system_prompt="Answer.", middleware=[mine])
        await agent_b.ainvoke({"messages": [HumanMessage("B's secret question")]})
        await agent_a.ainvoke({"messages": [HumanMessage("A's first question")]})
        await agent_a.ainvoke({"messages": [HumanMessage("A's second question")]})
    finally:
        conn_a.close()
        conn_b.close()
    assert mine._session is not None and theirs._session is not None
    assert mine._session["session_id"] != theirs._session["session_id"]
    assert mine._session["session_name"] == theirs._session["session_name"] == conv
    assert _said(model_a.requests[-1]) == ["A's first question", "A's second question"]
    assert _said(model_b.requests[-1]) == ["B's secret question"]
