"""Anthropic Messages, with its prompt-cache marks (docs/prompt-caching.md):
``cache_control`` breakpoints on the conversation's last block, the end of tools+system
and the summary (past the lookback, also after where the previous model call's request
ended; with a 1-hour lifetime, where the conversation stood at the newest user message),
none on a prefix shorter than the model's minimum (``domain.caching.breakpoints``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from domain.authority import may_instruct, speaking_role
from domain.caching.breakpoints import Anchors, place
from domain.caching.rules import DEFAULT_TTL, CacheRules
from domain.context.formats.format import (
    Message,
    ProviderFormat,
    RenderOptions,
    Tool,
    schema,
    tool_text,
)

NAME = "anthropic_messages"
EPHEMERAL = {"type": "ephemeral"}


def _render(messages: Sequence[Message], tools: Sequence[Tool], o: RenderOptions) -> dict[str, Any]:
    return _anthropic(messages, tools, o.cache or CacheRules(), o.tools_tokens)


def _anthropic(
    messages: Sequence[Message],
    tools: Sequence[Tool],
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
            {"name": t["name"], "description": t.get("description", ""), "input_schema": schema(t)}
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
            block["content"] = tool_text(m)
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


def _sent_roles(
    messages: Sequence[Mapping[str, Any]], roles: list[str], sent: list[Any]
) -> list[str]:
    """The leading system blocks went into ``system``, everything else user or
    assistant turns."""
    lead = 0
    while lead < len(roles) and roles[lead] == "system":
        lead += 1
    return [
        "system" if i < lead else ("assistant" if r == "assistant" else "user")
        for i, r in enumerate(roles)
    ]


FORMAT = ProviderFormat(NAME, _render, _sent_roles, ("5m", "1h"), "anthropic", cache_marks=True)
