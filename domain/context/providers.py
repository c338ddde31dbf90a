"""Provider-ready rendering of a PreparedContext: OpenAI Chat Completions,
OpenAI Responses input items and Anthropic Messages. Pure and deterministic — golden
files pin the exact JSON (tests/golden/providers/).

Our neutral messages keep tool groups whole (R5.1), so each format gets every call with
its result; state and summary blocks become text in the position they hold. Roles follow
authority by origin (``domain.authority``): only release-owned blocks are sent as
system/developer, whatever role a message was given upstream (R3.3, R12.4).

Prompt-cache hints (docs/prompt-caching.md): Anthropic requests carry ``cache_control``
breakpoints on the conversation's last block, the end of tools+system and the summary
(past the lookback, also after where the previous model call's request ended; with a
1-hour lifetime, where the conversation stood at the newest user message), none on a
prefix shorter than the model's minimum (``domain.caching.breakpoints``); OpenAI
requests carry the ``prompt_cache_key`` the caller derives with ``prompt_cache_key`` and,
with the profile's ``24h`` lifetime, ``prompt_cache_retention``. All are functions of the
inputs and the profile only, so the bytes stay the same for the same inputs (R4.3).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from domain.authority import may_instruct, speaking_role
from domain.caching.breakpoints import Anchors, place
from domain.caching.rules import DEFAULT_TTL, CacheRules

Message = dict[str, Any]
FORMATS = ("openai_chat", "openai_responses", "anthropic_messages")
EPHEMERAL = {"type": "ephemeral"}
EXTENDED_RETENTION = "24h"  # OpenAI's extended prompt cache retention


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
    cache: CacheRules | None = None,
    tools_tokens: int | None = None,
) -> dict[str, Any]:
    """The provider request for ``messages``. ``cache_key`` (from ``prompt_cache_key``)
    becomes the OpenAI formats' ``prompt_cache_key``, and ``cache`` (the model's rules:
    ``cache_rules`` of its profile; the defaults without one) their
    ``prompt_cache_retention`` when it is ``24h``. Anthropic's breakpoints follow ``cache``
    over the messages' ``tokens`` and ``tools_tokens`` (the tool schemas' count)."""
    if provider_format == "anthropic_messages":
        return _anthropic(messages, tools, cache or CacheRules(), tools_tokens)
    try:
        renderer: Callable[[Sequence[Message], Sequence[dict[str, Any]]], dict[str, Any]] = {
            "openai_chat": _openai_chat,
            "openai_responses": _openai_responses,
        }[provider_format]
    except KeyError as exc:
        raise ValueError(f"unknown provider format {provider_format!r}; one of {FORMATS}") from exc
    body = renderer(messages, tools)
    if cache_key:
        body["prompt_cache_key"] = cache_key
    if cache is not None and cache.ttl == EXTENDED_RETENTION:
        body["prompt_cache_retention"] = EXTENDED_RETENTION
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


def _anthropic(
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    rules: CacheRules,
    tools_tokens: int | None,
) -> dict[str, Any]:
    """The leading release-owned blocks (instructions, skill catalog, re-provided skill
    instructions) go to ``system`` as text blocks; anything later becomes user text (the
    API has no mid-conversation system role); consecutive same-role turns merge, since
    the API requires alternation; tool results travel in the next user turn. Then the
    cache breakpoints: ``_anchors`` placed by ``domain.caching.breakpoints.place``."""
    lead = 0
    while lead < len(messages) and speaking_role(messages[lead]) == "system":
        lead += 1
    system = [
        {"type": "text", "text": str(m.get("content", ""))}
        for m in messages[:lead]
        if may_instruct(m) and str(m.get("content", "")).strip()
    ]
    turns: list[dict[str, Any]] = []
    flat: list[dict[str, Any]] = []  # the messages' content blocks, in order
    ends: dict[int, int] = {}  # message index -> the position in ``flat`` of its last block
    for i in range(lead, len(messages)):
        for role, block in _anthropic_blocks(messages[i]):
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].append(block)
            else:
                turns.append({"role": role, "content": [block]})
            flat.append(block)
            ends[i] = len(flat) - 1
    body: dict[str, Any] = {"messages": turns}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = [
            {"name": t["name"], "description": t.get("description", ""), "input_schema": _schema(t)}
            for t in tools
        ]
    head = [*body.get("tools", []), *body.get("system", [])]
    order = [*head, *flat]  # every block in the order the API caches them
    sized = _prefix_tokens(messages, lead, ends, len(body.get("tools", [])), tools_tokens)
    anchors = _anchors(messages, lead, ends, order, len(head))
    for pos, ttl in place(anchors, sized, rules, lambda q: _cacheable(order[q])):
        order[pos]["cache_control"] = _mark(ttl)
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


# Blocks the assembler puts after the conversation (R4.4, R12.4: the frontier, the
# material retrieved for this call): they change from one call to the next, so the
# conversation's end, not theirs, is the prefix the next request shares.
TAIL_BLOCKS = frozenset({"constraints", "plan", "material"})


def _anchors(
    messages: Sequence[Message],
    lead: int,
    ends: dict[int, int],
    order: Sequence[dict[str, Any]],
    offset: int,
) -> Anchors:
    """Where this request's reusable prefixes end (``domain.caching.breakpoints``): the
    end of tools+system (the last system block, or the last tool without one: the API
    caches tools, then system, then messages), the summary's block, the conversation's
    last block, its last block before the newest user message and before the newest
    assistant message (where the request of the model call that wrote it ended). Never
    an empty block (the API refuses a mark there)."""

    def at(i: int) -> int | None:
        pos = offset + ends[i]
        return pos if _cacheable(order[pos]) else None

    def conversation_end(stop: int) -> int | None:
        for i in range(stop - 1, lead - 1, -1):
            if i in ends and messages[i].get("block") not in TAIL_BLOCKS:
                return at(i)
        return None

    def newest(role: str) -> int | None:
        said = [
            i
            for i in ends
            if speaking_role(messages[i]) == role and messages[i].get("block") == "interaction"
        ]
        return conversation_end(said[-1]) if said else None

    summaries = [i for i in ends if messages[i].get("block") == "summary"]
    return Anchors(
        head=offset - 1 if offset and _cacheable(order[offset - 1]) else None,
        summary=at(summaries[-1]) if summaries else None,
        turn_start=newest("user"),
        end=conversation_end(len(messages)),
        previous_end=newest("assistant"),
    )


def _prefix_tokens(
    messages: Sequence[Message],
    lead: int,
    ends: dict[int, int],
    n_tools: int,
    tools_tokens: int | None,
) -> list[int | None]:
    """The tokens up to and including each block, in cache order, from the counts the
    assembler gave each message (``tokens``) and ``tools_tokens``: every tool counts all
    tools, every system block all of system (only the last of each is an anchor), a
    message's last block counts through the message and its earlier blocks through the
    message before. None from the first unknown count on (assumed long enough)."""
    out: list[int | None] = [tools_tokens] * n_tools
    total = tools_tokens if n_tools else 0
    for m in messages[:lead]:
        total = _plus(total, m)
    out += [total] * sum(
        1 for m in messages[:lead] if may_instruct(m) and str(m.get("content", "")).strip()
    )
    start = 0
    for i in sorted(ends):
        before = total
        total = _plus(total, messages[i])
        out += [before] * (ends[i] - start) + [total]
        start = ends[i] + 1
    return out


def _plus(total: int | None, m: Message) -> int | None:
    tokens = m.get("tokens")
    return None if total is None or not isinstance(tokens, int) else total + tokens


def _mark(ttl: str) -> dict[str, str]:
    """A breakpoint; the lifetime is rendered when it is not the API's default (5 min)."""
    return dict(EPHEMERAL) | ({} if ttl == DEFAULT_TTL else {"ttl": ttl})


def _cacheable(block: dict[str, Any]) -> bool:
    if block.get("type") == "text":
        return bool(str(block.get("text", "")).strip())
    if block.get("type") == "tool_result":
        return bool(str(block.get("content", "")).strip())
    return True


def _json_object(arguments: str) -> Any:
    # Arguments were validated as JSON at ingest (bad_tool_arguments otherwise).
    return json.loads(arguments) if arguments else {}
