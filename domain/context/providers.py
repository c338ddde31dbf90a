"""Provider-ready rendering of a PreparedContext: OpenAI Chat Completions,
OpenAI Responses input items and Anthropic Messages. Pure and deterministic — golden
files pin the exact JSON (tests/golden/providers/).

Our neutral messages keep tool groups whole (R5.1), so each format gets every call with
its result; state and summary blocks become text in the position they hold. Roles follow
authority by origin (``domain.authority``): only release-owned blocks are sent as
system/developer, whatever role a message was given upstream (R3.3, R12.4).

Prompt-cache hints (docs/prompt-caching.md): Anthropic requests carry
``cache_control`` breakpoints at the end of tools+system, the summary and the stable
history; OpenAI requests carry the ``prompt_cache_key`` the caller derives with
``prompt_cache_key``. Both are functions of the inputs only, so the bytes stay the same
for the same inputs (R4.3).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from domain.authority import may_instruct, speaking_role

Message = dict[str, Any]
FORMATS = ("openai_chat", "openai_responses", "anthropic_messages")
EPHEMERAL = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4  # Anthropic refuses a request with more


def prompt_cache_key(space_id: str, session_id: str, run_id: str, instance_id: str) -> str:
    """The OpenAI ``prompt_cache_key`` of a thread: an opaque digest, so no raw id is sent.
    A session's main thread keeps one key across its runs (each new question's request
    continues the previous one's prefix); a thread with any other instance id (a child)
    has its own. The space is part of the digest, so equal ids in two spaces never share
    a key."""
    scope = "main" if instance_id == f"{run_id}.main" else f"instance:{instance_id}"
    raw = "\x00".join(("alc-prompt-cache/v1", space_id, session_id, scope))
    return "alc_" + hashlib.sha256(raw.encode()).hexdigest()[:32]


def render(
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    provider_format: str,
    cache_key: str | None = None,
) -> dict[str, Any]:
    """The provider request for ``messages``. ``cache_key`` (from ``prompt_cache_key``)
    becomes the OpenAI formats' ``prompt_cache_key``; Anthropic's hints need none."""
    try:
        renderer: Callable[[Sequence[Message], Sequence[dict[str, Any]]], dict[str, Any]] = {
            "openai_chat": _openai_chat,
            "openai_responses": _openai_responses,
            "anthropic_messages": _anthropic,
        }[provider_format]
    except KeyError as exc:
        raise ValueError(f"unknown provider format {provider_format!r}; one of {FORMATS}") from exc
    body = renderer(messages, tools)
    if cache_key and provider_format != "anthropic_messages":
        body["prompt_cache_key"] = cache_key
    return body


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
    instructions) go to ``system`` as text blocks; anything later becomes user text (the
    API has no mid-conversation system role); consecutive same-role turns merge, since
    the API requires alternation; tool results travel in the next user turn. Then the
    cache breakpoints (``_mark_breakpoints``)."""
    lead = 0
    while lead < len(messages) and speaking_role(messages[lead]) == "system":
        lead += 1
    system = [
        {"type": "text", "text": str(m.get("content", ""))}
        for m in messages[:lead]
        if may_instruct(m) and str(m.get("content", "")).strip()
    ]
    turns: list[dict[str, Any]] = []
    # the block each neutral message ended with, by index into ``messages``.
    last_block: dict[int, dict[str, Any]] = {}

    def push(i: int, role: str, block: dict[str, Any]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].append(block)
        else:
            turns.append({"role": role, "content": [block]})
        last_block[i] = block

    for i in range(lead, len(messages)):
        for role, block in _anthropic_blocks(messages[i]):
            push(i, role, block)
    body: dict[str, Any] = {"messages": turns}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = [
            {"name": t["name"], "description": t.get("description", ""), "input_schema": _schema(t)}
            for t in tools
        ]
    _mark_breakpoints(body, messages, last_block)
    return body


def _anthropic_blocks(m: Message) -> list[tuple[str, dict[str, Any]]]:
    role = speaking_role(m)
    if role == "assistant":
        out: list[tuple[str, dict[str, Any]]] = []
        if m.get("content"):
            out.append(("assistant", {"type": "text", "text": m["content"]}))
        for c in m.get("tool_calls") or []:
            use = {
                "type": "tool_use",
                "id": c["id"],
                "name": c["name"],
                "input": _json_object(c["arguments"]),
            }
            out.append(("assistant", use))
        return out
    if role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": m["tool_call_id"],
            "content": str(m.get("content", "")),
        }
        if m.get("status", "ok") != "ok":
            block["is_error"] = True
            block["content"] = _tool_text(m)
        return [("user", block)]
    return [("user", {"type": "text", "text": m.get("content", "")})]


def stable_prefix_end(messages: Sequence[Message]) -> int:
    """How many leading messages are the stable history: everything before the newest
    user interaction message (the question or turn being answered), whose successors are
    the current turn and change from one loop to the next. 0 without a user message."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("block") == "interaction" and speaking_role(m) == "user":
            return i
    return 0


def _mark_breakpoints(
    body: dict[str, Any], messages: Sequence[Message], last_block: dict[int, dict[str, Any]]
) -> None:
    """``cache_control`` at most on: (1) the end of tools+system — the last system block,
    or the last tool without one (the API caches tools, then system, then messages);
    (2) the summary's block; (3) the last block of the stable history — of the last
    interaction message (a question, answer, call or result) before the newest user
    message; state and material blocks there may change between calls. Never on an empty
    block, never twice on one block, never more than four."""
    marks: list[dict[str, Any]] = []
    if body.get("system"):
        marks.append(body["system"][-1])
    elif body.get("tools"):
        marks.append(body["tools"][-1])
    summaries = [i for i in last_block if messages[i].get("block") == "summary"]
    if summaries:
        marks.append(last_block[summaries[-1]])
    end = stable_prefix_end(messages)
    stable = [i for i in last_block if i < end and messages[i].get("block") == "interaction"]
    if stable:
        marks.append(last_block[stable[-1]])
    seen: set[int] = set()
    for block in marks:
        if id(block) in seen or not _cacheable(block) or len(seen) >= MAX_BREAKPOINTS:
            continue
        seen.add(id(block))
        block["cache_control"] = dict(EPHEMERAL)


def _cacheable(block: dict[str, Any]) -> bool:
    if block.get("type") == "text":
        return bool(str(block.get("text", "")).strip())
    if block.get("type") == "tool_result":
        return bool(str(block.get("content", "")).strip())
    return True


def _json_object(arguments: str) -> Any:
    # Arguments were validated as JSON at ingest (bad_tool_arguments otherwise).
    return json.loads(arguments) if arguments else {}
