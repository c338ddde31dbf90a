"""A rendered provider request as a prompt cache sees it (``domain.caching.replay.Sent``):
its blocks in the order the provider caches them, each keyed by its exact JSON (without
its mark) and counted by its payload, and the positions and lifetimes of its marks. Pure.

Anthropic Messages: each tool, each system block, each content block of each message
(keyed with its turn's role). OpenAI Chat: each tool, each message. OpenAI Responses:
each tool, the instructions, each input item.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from domain.caching.replay import Block, Sent
from domain.caching.rules import DEFAULT_TTL

CountFn = Callable[[str], int]


def sent_request(body: dict[str, Any], fmt: str, count: CountFn, at_s: float = 0.0) -> Sent:
    """``body`` (``domain.context.providers.render`` output in ``fmt``) sent at ``at_s``."""
    parts = list(_anthropic(body) if fmt == "anthropic_messages" else _openai(body))
    blocks = [Block(_key(scope, part), count(block_text(part))) for scope, part in parts]
    marked = [
        (i, part["cache_control"]) for i, (_, part) in enumerate(parts) if "cache_control" in part
    ]
    marks = tuple(i for i, _ in marked)
    return Sent(blocks, marks, at_s, tuple(str(m.get("ttl", DEFAULT_TTL)) for _, m in marked))


def _anthropic(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for tool in body.get("tools", []):
        yield "tool", tool
    for block in body.get("system", []):
        yield "system", block
    for turn in body.get("messages", []):
        for block in turn["content"]:
            yield turn["role"], block


def _openai(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for tool in body.get("tools", []):
        yield "tool", tool
    if body.get("instructions"):
        yield "instructions", {"text": body["instructions"]}
    for item in body.get("messages", body.get("input", [])):
        yield "item", item


def _key(scope: str, part: dict[str, Any]) -> str:
    bare = {k: v for k, v in part.items() if k != "cache_control"}
    return scope + ":" + json.dumps(bare, sort_keys=True, separators=(",", ":"))


def block_text(part: dict[str, Any]) -> str:
    """The text a block carries (its JSON keys and punctuation are left out)."""
    out: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            for k, x in v.items():
                if k not in ("type", "cache_control", "role", "id", "tool_use_id", "call_id"):
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(part)
    return "\n".join(out)
