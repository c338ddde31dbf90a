"""OpenAI Chat Completions: one request message per message, roles as spoken; tool
calls as ``function`` calls, results as ``tool`` messages."""

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

NAME = "openai_chat"


def _render(messages: Sequence[Message], tools: Sequence[Tool], o: RenderOptions) -> dict[str, Any]:
    return with_openai_cache(_openai_chat(messages, tools), o)


def _openai_chat(messages: Sequence[Message], tools: Sequence[Tool]) -> dict[str, Any]:
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
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": tool_text(m)})
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
                    "parameters": schema(t),
                },
            }
            for t in tools
        ]
    return body


def _sent_roles(
    messages: Sequence[Mapping[str, Any]], roles: list[str], sent: list[Any]
) -> list[str]:
    """Read from the request itself when it kept one message per message."""
    if len(sent) == len(messages):
        return [str(m.get("role")) for m in sent]
    return roles


FORMAT = ProviderFormat(
    NAME, _render, _sent_roles, ("5m", "24h"), "openai", messages_one_to_one=True
)
