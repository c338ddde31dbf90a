"""Provider-ready rendering of a PreparedContext (issue 4): OpenAI Chat Completions,
OpenAI Responses input items and Anthropic Messages. Pure and deterministic — golden
files pin the exact JSON (tests/golden/providers/).

Our neutral messages keep tool groups whole (R5.1), so each format gets every call with
its result; state and summary blocks become text in the position they hold. Roles follow
authority by origin (``domain.authority``): only release-owned blocks are sent as
system/developer, whatever role a message was given upstream (R3.3, R12.4).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from domain.authority import may_instruct, speaking_role

Message = dict[str, Any]
FORMATS = ("openai_chat", "openai_responses", "anthropic_messages")


def render(
    messages: Sequence[Message], tools: Sequence[dict[str, Any]], provider_format: str
) -> dict[str, Any]:
    try:
        renderer: Callable[[Sequence[Message], Sequence[dict[str, Any]]], dict[str, Any]] = {
            "openai_chat": _openai_chat,
            "openai_responses": _openai_responses,
            "anthropic_messages": _anthropic,
        }[provider_format]
    except KeyError as exc:
        raise ValueError(f"unknown provider format {provider_format!r}; one of {FORMATS}") from exc
    return renderer(messages, tools)


def _schema(tool: dict[str, Any]) -> dict[str, Any]:
    return tool.get("parameters") or tool.get("input_schema") or {"type": "object"}


# --- OpenAI Chat Completions --------------------------------------------------------------


def _openai_chat(messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for m in messages:
        role = speaking_role(m)
        if role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": m.get("content") or None}
            if m.get("tool_calls"):
                item["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in m["tool_calls"]
                ]
            out.append(item)
        elif role == "tool":
            out.append(
                {"role": "tool", "tool_call_id": m["tool_call_id"], "content": _tool_text(m)}
            )
        else:
            out.append({"role": role, "content": m.get("content", "")})
    body: dict[str, Any] = {"messages": out}
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t.get("description", ""),
                    "parameters": _schema(t),
                },
            }
            for t in tools
        ]
    return body


def _tool_text(m: Message) -> str:
    """The real status travels with the result (R3.5): an error is never shown as ok."""
    status = m.get("status", "ok")
    text = str(m.get("content", ""))
    return text if status == "ok" else f"[status: {status}] {text}"


# --- OpenAI Responses -----------------------------------------------------------------------


def _openai_responses(
    messages: Sequence[Message], tools: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    instructions = [m["content"] for m in messages if m.get("block") == "instruction"]
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.get("block") == "instruction":
            continue
        role = speaking_role(m)
        if role == "assistant":
            if m.get("content"):
                items.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": m["content"]}],
                    }
                )
            for c in m.get("tool_calls") or []:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": c["id"],
                        "name": c["name"],
                        "arguments": c["arguments"],
                    }
                )
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": m["tool_call_id"],
                    "output": _tool_text(m),
                }
            )
        else:
            items.append(
                {
                    "type": "message",
                    "role": "developer" if role == "system" else role,
                    "content": [{"type": "input_text", "text": m.get("content", "")}],
                }
            )
    body: dict[str, Any] = {"instructions": "\n\n".join(instructions), "input": items}
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": _schema(t),
            }
            for t in tools
        ]
    return body


# --- Anthropic Messages ---------------------------------------------------------------------


def _anthropic(messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The leading release-owned blocks (instructions, skill catalog, re-provided skill
    instructions) go to ``system``; anything later becomes user text (the API has no
    mid-conversation system role); consecutive same-role turns merge, since the API
    requires alternation; tool results travel in the next user turn."""
    lead = 0
    while lead < len(messages) and speaking_role(messages[lead]) == "system":
        lead += 1
    system = [str(m.get("content", "")) for m in messages[:lead] if may_instruct(m)]
    turns: list[dict[str, Any]] = []

    def push(role: str, block: dict[str, Any]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].append(block)
        else:
            turns.append({"role": role, "content": [block]})

    for m in messages[lead:]:
        role = speaking_role(m)
        if role == "assistant":
            if m.get("content"):
                push("assistant", {"type": "text", "text": m["content"]})
            for c in m.get("tool_calls") or []:
                push(
                    "assistant",
                    {
                        "type": "tool_use",
                        "id": c["id"],
                        "name": c["name"],
                        "input": _json_object(c["arguments"]),
                    },
                )
        elif role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m["tool_call_id"],
                "content": str(m.get("content", "")),
            }
            if m.get("status", "ok") != "ok":
                block["is_error"] = True
                block["content"] = _tool_text(m)
            push("user", block)
        else:
            push("user", {"type": "text", "text": m.get("content", "")})
    body: dict[str, Any] = {"system": "\n\n".join(system), "messages": turns}
    if tools:
        body["tools"] = [
            {"name": t["name"], "description": t.get("description", ""), "input_schema": _schema(t)}
            for t in tools
        ]
    return body


def _json_object(arguments: str) -> Any:
    # Arguments were validated as JSON at ingest (bad_tool_arguments otherwise).
    return json.loads(arguments) if arguments else {}
