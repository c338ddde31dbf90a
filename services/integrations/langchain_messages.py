"""LangChain messages ⇄ our events and prepared context — pure, no I/O (the middleware in
``langchain.py`` calls it).

Messages → ops (the ``responses_items`` ops, so both integrations record alike): a
``HumanMessage`` is a user op; an ``AIMessage`` is one model result with its tool calls
(call ids kept, arguments as JSON); a ``ToolMessage`` is the outcome of its call (its
``status`` kept). Keys come from the message id, which LangGraph's ``add_messages``
assigns once and keeps: a model call LangChain retries records nothing twice.

Prepared context (``openai_chat``) → messages: system/user/assistant(tool_calls)/tool
become ``SystemMessage`` / ``HumanMessage`` / ``AIMessage`` / ``ToolMessage``; our context
keeps tool groups whole, so every ``ToolMessage`` follows the ``AIMessage`` with its call.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)

from domain.responses_items import ModelOp, Op, ToolOp, UserOp, text_of


def to_op(message: BaseMessage) -> Op | None:
    """The op a message becomes; ``None`` for what is not conversation (e.g. a
    ``RemoveMessage`` or a chunk of an unknown kind)."""
    if isinstance(message, HumanMessage):
        return UserOp(text_of(message.content))
    if isinstance(message, SystemMessage):
        return UserOp(text_of(message.content), "system")
    if isinstance(message, AIMessage):
        calls = tuple(
            (str(c["id"]), c["name"], json.dumps(c["args"], sort_keys=True))
            for c in message.tool_calls
        )
        return ModelOp(text_of(message.content), calls)
    if isinstance(message, ToolMessage):
        status = "error" if message.status == "error" else "ok"
        return ToolOp(str(message.tool_call_id), text_of(message.content), status)
    return None


def message_key(prefix: str, session_id: str, message: BaseMessage, op: Op) -> str:
    """An idempotency key from the message's id (or, without one, its content)."""
    body = json.dumps([session_id, message.id or "", repr(op)], ensure_ascii=False)
    return f"{prefix}{hashlib.sha256(body.encode()).hexdigest()[:40]}"


def new_messages(messages: Iterable[BaseMessage], seen: Collection[str]) -> list[BaseMessage]:
    """Messages not yet recorded (by id); a message without an id is always new."""
    return [m for m in messages if not m.id or m.id not in seen]


def _args(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments or "{}")
    except (TypeError, ValueError):
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def to_messages(
    chat: Sequence[dict[str, Any]], drop_system: Collection[str] = ()
) -> list[BaseMessage]:
    """Our rendered ``openai_chat`` messages as LangChain messages. ``drop_system``: texts
    of system messages left out (the release's instructions: the agent sends its own)."""
    out: list[BaseMessage] = []
    for m in chat:
        role, text = m.get("role"), text_of(m.get("content") or "")
        if role == "system" or role == "developer":
            if text not in drop_system:
                out.append(SystemMessage(text))
        elif role == "assistant":
            calls = [
                ToolCall(
                    name=c["function"]["name"],
                    args=_args(c["function"].get("arguments")),
                    id=c["id"],
                    type="tool_call",
                )
                for c in m.get("tool_calls") or []
            ]
            out.append(AIMessage(text, tool_calls=calls))
        elif role == "tool":
            out.append(ToolMessage(text, tool_call_id=str(m["tool_call_id"])))
        else:
            out.append(HumanMessage(text))
    return out


def response_of(message: AIMessage) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's answer and its usage as the gateway records them (``usage`` is empty
    when the chat model reports none)."""
    response = {
        "role": "assistant",
        "content": text_of(message.content),
        "tool_calls": [
            {"id": c["id"], "name": c["name"], "arguments": json.dumps(c["args"])}
            for c in message.tool_calls
        ],
    }
    meta = message.usage_metadata
    usage: dict[str, Any] = {}
    if meta:
        usage = {"input_tokens": meta["input_tokens"], "output_tokens": meta["output_tokens"]}
    return response, usage


def pairs_intact(messages: Sequence[BaseMessage]) -> bool:
    """Every ``ToolMessage`` follows the ``AIMessage`` that called it, and every call has
    its result (what providers require, and what a plain trim breaks: langchain #38352)."""
    calls: list[str] = []
    results: set[str] = set()
    for m in messages:
        if isinstance(m, AIMessage):
            calls.extend(str(c["id"]) for c in m.tool_calls)
        elif isinstance(m, ToolMessage):
            if m.tool_call_id not in calls:
                return False
            results.add(m.tool_call_id)
    return set(calls) <= results
