"""Responses items ⇄ our events, without I/O (domain/responses_items.py)."""

from __future__ import annotations

from domain import responses_items as ri


def test_items_group_into_question_model_result_and_tool_outcomes() -> None:
    ops = ri.to_ops(
        [
            {"role": "user", "content": "Read t1"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "On it."}],
            },
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "b"}],
            },
            {"role": "assistant", "content": "Done."},
        ]
    )
    assert ops == [
        ri.UserOp("Read t1"),
        ri.ModelOp("On it.", (("c1", "read", "{}"), ("c2", "read", "{}"))),
        ri.ToolOp("c1", "a"),
        ri.ToolOp("c2", "b"),
        ri.ModelOp("Done."),
    ]


def test_keys_depend_on_content_and_position() -> None:
    op = ri.UserOp("hi")
    assert ri.op_key("u:", "r", 0, op) == ri.op_key("u:", "r", 0, op)
    assert ri.op_key("u:", "r", 0, op) != ri.op_key("u:", "r", 1, op)
    assert ri.op_key("u:", "r", 0, op) != ri.op_key("u:", "r", 0, ri.UserOp("ho"))


def test_a_limit_never_leaves_an_output_without_its_call() -> None:
    items = [
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c1", "name": "n", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "n", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a"},
        {"type": "function_call_output", "call_id": "c2", "output": "b"},
    ]
    assert ri.last(items, 3) == [items[2], items[4]]
    assert ri.last(items, 0) == [] and ri.last(items, None) == items


def test_rendered_messages_come_back_in_the_easy_form() -> None:
    rendered = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
        {"type": "function_call", "call_id": "c1", "name": "n", "arguments": "{}"},
    ]
    assert ri.to_items(rendered) == [{"role": "user", "content": "q"}, rendered[1]]
