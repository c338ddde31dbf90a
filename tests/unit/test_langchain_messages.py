"""LangChain messages ⇄ our ops and prepared context (``langchain_messages``): roles,
call ids and tool pairs survive both ways; keys come from message ids."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from services.core.providers import render
from services.integrations import langchain_messages as lm
from services.integrations.responses_items import ModelOp, ToolOp, UserOp

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
