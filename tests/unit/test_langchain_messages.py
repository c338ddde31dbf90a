"""LangChain messages ⇄ our ops and prepared context (``langchain_messages``): roles,
call ids and tool pairs survive both ways; keys come from message ids."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from domain.context.providers import render
from domain.responses_items import ModelOp, ToolOp, UserOp
from services.integrations import langchain_messages as lm

CALL = {"name": "lookup", "args": {"table": "t1"}, "id": "call_1", "type": "tool_call"}


def test_messages_become_the_ops_of_both_integrations() -> None:
    msgs = [
        HumanMessage("What is in t1?", id="h1"),
        AIMessage("Looking.", tool_calls=[CALL], id="a1"),
        ToolMessage("t1: rows", tool_call_id="call_1", name="lookup", id="t1"),
        ToolMessage("boom", tool_call_id="call_2", status="error", id="t2"),
        SystemMessage("Be brief.", id="s1"),
        RemoveMessage(id="a1"),
    ]
    assert [lm.to_op(m) for m in msgs] == [
        UserOp("What is in t1?"),
        ModelOp("Looking.", (("call_1", "lookup", json.dumps({"table": "t1"})),)),
        ToolOp("call_1", "t1: rows"),
        ToolOp("call_2", "boom", "error"),
        UserOp("Be brief.", "system"),
        None,
    ]


def test_content_parts_are_joined_as_text() -> None:
    human = HumanMessage([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
    assert lm.to_op(human) == UserOp("a\nb")


def test_keys_come_from_the_message_id() -> None:
    a, b = HumanMessage("same", id="m1"), HumanMessage("same", id="m2")
    op = UserOp("same")
    assert lm.message_key("u:", "s", a, op) == lm.message_key("u:", "s", a, op)
    assert lm.message_key("u:", "s", a, op) != lm.message_key("u:", "s", b, op)
    assert lm.message_key("u:", "s", a, op) != lm.message_key("u:", "other", a, op)
    assert lm.message_key("u:", "s", a, op).startswith("u:")


def test_new_messages_skips_recorded_ids_and_keeps_those_without() -> None:
    msgs = [HumanMessage("a", id="1"), AIMessage("b", id="2"), HumanMessage("c")]
    assert [m.content for m in lm.new_messages(msgs, {"1"})] == ["b", "c"]


def _prepared() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You answer.", "block": "instruction"},
        {"role": "user", "content": "[history summary] t0 had 60 rows", "block": "summary"},
        {"role": "user", "content": "What is in t1?", "block": "interaction"},
        {
            "role": "assistant",
            "content": "",
            "block": "interaction",
            "tool_calls": [{"id": "call_1", "name": "lookup", "arguments": '{"table": "t1"}'}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "t1: rows", "block": "interaction"},
        {
            "role": "tool",
            "tool_call_id": "call_9",
            "content": "failed",
            "status": "error",
            "block": "interaction",
        },
    ]


def test_rendered_context_becomes_langchain_messages_with_pairs_intact() -> None:
    chat = render(_prepared(), [], "openai_chat")["messages"]
    out = lm.to_messages(chat)
    assert [type(m).__name__ for m in out] == [
        "SystemMessage",
        "HumanMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "ToolMessage",
    ]
    ai = out[3]
    assert isinstance(ai, AIMessage)
    assert ai.tool_calls == [CALL]
    tool = out[4]
    assert isinstance(tool, ToolMessage) and tool.tool_call_id == "call_1"
    assert out[2].content == "What is in t1?"
    assert out[5].content == "[status: error] failed"  # the real status travels with it
    assert not lm.pairs_intact(out)  # call_9 has no call: the check can fail
    assert lm.pairs_intact(out[:5])


def test_the_release_instructions_are_left_out_other_system_text_kept() -> None:
    chat = [
        {"role": "system", "content": "You answer."},
        {"role": "system", "content": "Skill catalog."},
        {"role": "user", "content": "q"},
    ]
    out = lm.to_messages(chat, {"You answer."})
    assert [(type(m).__name__, m.content) for m in out] == [
        ("SystemMessage", "Skill catalog."),
        ("HumanMessage", "q"),
    ]


def test_arguments_that_are_not_an_object_are_kept() -> None:
    chat = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}},
                {"id": "d", "type": "function", "function": {"name": "g", "arguments": "{bad"}},
            ],
        }
    ]
    ai = lm.to_messages(chat)[0]
    assert isinstance(ai, AIMessage)
    assert [c["args"] for c in ai.tool_calls] == [{"arguments": [1]}, {"arguments": "{bad"}]


def test_pairs_intact_rejects_a_result_before_or_without_its_call() -> None:
    ai = AIMessage("", tool_calls=[CALL])
    result = ToolMessage("r", tool_call_id="call_1")
    assert lm.pairs_intact([ai, result])
    assert not lm.pairs_intact([result, ai])  # the langchain #38352 shape after a trim
    assert not lm.pairs_intact([ai])  # a call without its result


def test_response_and_usage_for_the_gateway() -> None:
    ai = AIMessage(
        "done",
        tool_calls=[CALL],
        usage_metadata={"input_tokens": 120, "output_tokens": 7, "total_tokens": 127},
    )
    response, usage = lm.response_of(ai)
    assert response["content"] == "done"
    assert response["tool_calls"] == [
        {"id": "call_1", "name": "lookup", "arguments": json.dumps({"table": "t1"})}
    ]
    assert usage == {"input_tokens": 120, "output_tokens": 7}
    assert lm.response_of(AIMessage("x"))[1] == {}


# --- the middleware over a hand-written fake client (no service) -------------------------


class _FakeClient:
    """Records what the middleware appends; prepares it all back, with instructions."""

    def __init__(self) -> None:
        self.msgs: list[dict[str, Any]] = []
        self.log: list[Any] = []

    async def __aenter__(self) -> _FakeClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    async def register_release(self, **_: Any) -> dict[str, Any]:
        return {"release_id": "rel"}

    async def _call(self, *_: Any, **__: Any) -> dict[str, Any]:
        from services.sdk.client import ApiError

        raise ApiError.of(404, "not_found", "no session", False)

    async def open_session(self, *a: Any) -> dict[str, Any]:
        return {"session_id": a[3], "space_id": "sp", "actor_id": "a"}

    async def start_run(self, _: Any) -> Any:
        from services.sdk.client import RunHandle

        self.log.append("start")
        return RunHandle("s", f"r{len(self.log)}", "i", "sp", "a", {})

    async def finish_run(self, _: Any) -> None:
        self.log.append("finish")

    async def append_user(self, _: Any, text: str, key: str, supplement: bool = False) -> None:
        self.log.append(("user", text, supplement))
        self.msgs.append({"role": "user", "content": text, "block": "interaction"})

    async def append_model_result(self, _: Any, text: str, op_id: str, calls: Any) -> None:
        self.log.append(("model", text))
        tool_calls = [{"id": c, "name": n, "arguments": a} for c, n, a in calls]
        self.msgs.append({"role": "assistant", "content": text, "tool_calls": tool_calls})

    async def append_tool_outcome(self, _: Any, cid: str, name: str, out: str, st: Any) -> None:
        self.log.append(("tool", cid, name))
        self.msgs.append({"role": "tool", "tool_call_id": cid, "content": out})

    async def prepare(self, *_: Any, **__: Any) -> dict[str, Any]:
        rel = {"role": "system", "content": "Release text.", "block": "instruction"}
        return {"prepared_id": "p", "messages": [rel, *self.msgs]}

    async def check_model_call(self, _: Any, prepared: dict[str, Any]) -> dict[str, Any]:
        return {"call_id": "mc", "request": render(prepared["messages"], [], "openai_chat")}

    async def report_model_result(self, _: Any, cid: str, resp: Any, usage: Any) -> None:
        self.log.append(("report", cid, usage))


def test_the_middleware_records_each_message_once_and_sends_our_context() -> None:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.tools import tool

    from services.integrations.connection import AgentLoomConnection
    from services.integrations.langchain import AgentLoomMiddleware

    requests: list[list[Any]] = []

    class Fake(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: Any, *a: Any, **k: Any) -> Any:
            requests.append(list(messages))
            return super()._generate(messages, *a, **k)

    @tool
    def lookup(table: str) -> str:
        """Read a table."""
        return f"{table}: rows"

    def script() -> Any:
        for q in range(2):
            call = {"name": "lookup", "args": {"table": f"t{q}"}, "id": f"call_{q}"}
            yield AIMessage("", tool_calls=[call])
            yield AIMessage(f"t{q} done.", usage_metadata={
                "input_tokens": 10, "output_tokens": 2, "total_tokens": 12})  # fmt: skip

    fake = _FakeClient()
    conn = AgentLoomConnection()
    conn._make = lambda: fake  # type: ignore[assignment,return-value]
    mw = AgentLoomMiddleware("s1", connection=conn)
    agent = create_agent(Fake(messages=script()), [lookup], system_prompt="Answer.",
                         middleware=[mw])  # fmt: skip
    try:
        agent.invoke({"messages": [HumanMessage("q0")]})  # no checkpointer: q0 is ours
        agent.invoke({"messages": [HumanMessage("q1")]})
    finally:
        conn.close()
    users = [e for e in fake.log if isinstance(e, tuple) and e[0] == "user"]
    assert users == [("user", "q0", False), ("user", "q1", False)]  # each once, a question
    assert fake.log.count("start") == 2 and fake.log.count("finish") == 1  # a run per question
    assert ("report", "mc", {"input_tokens": 10, "output_tokens": 2}) in fake.log
    assert len(requests) == 4
    last = requests[-1]
    assert [type(m).__name__ for m in last] == [
        "SystemMessage", "HumanMessage", "AIMessage", "ToolMessage",
        "AIMessage", "HumanMessage", "AIMessage", "ToolMessage",
    ]  # fmt: skip
    assert last[0].content == "Answer."  # the agent's prompt; the release's is left out
    assert last[1].content == "q0" and last[5].content == "q1"
    assert all(lm.pairs_intact(r) for r in requests)
