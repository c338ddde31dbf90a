"""OpenAI Responses: instructions apart, input items (system as developer), tool calls as
``function_call`` items and results as ``function_call_output``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from domain.authority import speaking_role
from domain.context.formats.format import (
    Message,
    ProviderFormat,
    RenderOptions,
    Tool,
    schema,
    tool_text,
    with_openai_cache,
)

NAME = "openai_responses"


def _render(messages: Sequence[Message], tools: Sequence[Tool], o: RenderOptions) -> dict[str, Any]:
    return with_openai_cache(_openai_responses(messages, tools), o)


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
                    "output": tool_text(m),
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
                "parameters": schema(t),
            }
            for t in tools
        ]
    return body


def _sent_roles(
    messages: Sequence[Mapping[str, Any]], roles: list[str], sent: list[Any]
) -> list[str]:
    responses = {"system": "developer"}
    return [
        "instructions" if m.get("block") == "instruction" else responses.get(r, r)
        for m, r in zip(messages, roles, strict=True)
    ]


FORMAT = ProviderFormat(NAME, _render, _sent_roles, ("5m", "24h"), "openai")
