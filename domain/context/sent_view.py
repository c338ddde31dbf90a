"""What a model call saw, as it was sent (R18, R4.2). Pure.

Built once, when the call is recorded, from the prepared context's annotated messages
(each with block id, category, retention, tokens, decision and reason) and the provider
request that was sent: each block carries the role it reached the model with. The
document is stored compressed with the call (storage/calls/views.py) and every later view
of the call — diagnostics, the inspector, ``agentloom session inspect`` — reads it, so
later retractions, revocations and summaries never change what a past call shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import zstandard

from domain.authority import speaking_role
from domain.context.formats.table import FORMAT_TABLE

VERSION = 1
Message = Mapping[str, Any]


def sent_roles(
    messages: Sequence[Message], request: Mapping[str, Any] | None, provider_format: str
) -> list[str]:
    """The role each message was sent with, as its format (``domain.context.formats``)
    reads it: OpenAI Chat keeps one request message per message, so its roles are read
    from the request itself; the other formats move blocks (Responses: instructions
    apart, system as developer; Anthropic: the leading system blocks into ``system``,
    everything else user or assistant turns). An unknown format: the speaking roles."""
    sent = list((request or {}).get("messages") or [])
    roles = [speaking_role(m) for m in messages]
    fmt = FORMAT_TABLE.get(provider_format)
    return roles if fmt is None else fmt.sent_roles(messages, roles, sent)


@dataclass(frozen=True)
class Source:
    """A source record of the call's view, as recorded (immutable)."""

    record_id: str
    kind: str
    sequence: int
    tokens: int


def sent_view(
    messages: Sequence[Message],
    request: Mapping[str, Any] | None,
    provider_format: str,
    request_sha256: str,
    summary: tuple[str | None, int | None] = (None, None),
    sources: Mapping[str, Source] | None = None,
    covered: Sequence[str] = (),
) -> dict[str, Any]:
    """The stored document: every block in order with the role it was sent with; after
    the summary block, the records it covers (``covered``, not sent: role None, decision
    ``summarized``); ``summary``: the summary in effect and its version (the source
    watermark it summarized to); ``sources``: the records the blocks name."""
    known = sources or {}
    blocks: list[dict[str, Any]] = []
    position = 0  # in the request's messages
    for m, role in aligned(messages, request, provider_format):
        position += role is not None
        if m is None:
            blocks.append(_hook_block(position - 1, role))
            continue
        ids = [str(i) for i in m.get("record_ids") or ()]
        first = known.get(ids[0]) if ids else None
        is_summary = m.get("block") == "summary"
        blocks.append(
            {
                "block_id": str(m.get("block_id")),
                "role": role,
                "category": str(m.get("category") or m.get("block") or "state"),
                "retention": str(m.get("retention") or "compressible"),
                "tokens": m.get("tokens"),
                "decision": "dropped" if role is None else str(m.get("decision") or "kept"),
                "reason": "removed_by_hook"
                if role is None
                else str(m.get("reason") or "in_thread"),
                "record_ids": ids,
                "kind": None if first is None else first.kind,
                "sequence": None if first is None else first.sequence,
                "summary_id": m.get("summary_id") if is_summary else None,
            }
        )
        if is_summary:
            blocks.extend(_covered(covered, known))
    return {
        "version": VERSION,
        "provider_format": provider_format,
        "request_sha256": request_sha256,
        "summary_id": summary[0],
        "summary_version": summary[1],
        "blocks": blocks,
    }


def aligned(
    messages: Sequence[Message], request: Mapping[str, Any] | None, provider_format: str
) -> list[tuple[Message | None, str | None]]:
    """Each message with the role it was sent with. When ``model.chat.before`` hooks
    added or removed OpenAI Chat messages, each of ours is matched to the next request
    message with its text: a request message matched by none is the hooks' (None, role),
    one of ours in none was removed (role None)."""
    sent = list((request or {}).get("messages") or [])
    fmt = FORMAT_TABLE.get(provider_format)
    one_to_one = fmt is not None and fmt.messages_one_to_one
    if not one_to_one or not sent or len(sent) == len(messages):
        return list(zip(messages, sent_roles(messages, request, provider_format), strict=True))
    out: list[tuple[Message | None, str | None]] = []
    j = 0
    for m in messages:
        k = next((i for i in range(j, len(sent)) if _same(m, sent[i])), None)
        if k is None:
            out.append((m, None))
            continue
        out.extend((None, str(x.get("role"))) for x in sent[j:k])
        out.append((m, str(sent[k].get("role"))))
        j = k + 1
    out.extend((None, str(x.get("role"))) for x in sent[j:])
    return out


def _same(m: Message, sent: Mapping[str, Any]) -> bool:
    if sent.get("role") == "tool":
        return bool(sent.get("tool_call_id") == m.get("tool_call_id"))
    return bool((sent.get("content") or "") == (m.get("content") or ""))


def _hook_block(n: int, role: str | None) -> dict[str, Any]:
    """A message a ``model.chat.before`` hook added (R14): sent, but in no prepared
    context."""
    return {
        "block_id": f"hook:{n}",  # its position in the request's messages
        "role": role,
        "category": "hook",
        "retention": "required",
        "tokens": None,
        "decision": "kept",
        "reason": "added_by_hook",
        "record_ids": [],
        "kind": None,
        "sequence": None,
        "summary_id": None,
    }


def _covered(covered: Sequence[str], known: Mapping[str, Source]) -> list[dict[str, Any]]:
    out = []
    for s in sorted((known[i] for i in covered if i in known), key=lambda s: s.sequence):
        out.append(
            {
                "block_id": f"rec:{s.record_id}",
                "role": None,  # not sent: the summary stands for it
                "category": "history",
                "retention": "compressible",
                "tokens": s.tokens,
                "decision": "summarized",
                "reason": "covered_by_summary",
                "record_ids": [s.record_id],
                "kind": s.kind,
                "sequence": s.sequence,
                "summary_id": None,
            }
        )
    return out


def pack(view: Mapping[str, Any]) -> bytes:
    """zstd level 3 over JSON: a view repeats its keys for every block."""
    return zstandard.ZstdCompressor(level=3).compress(orjson.dumps(view))


def unpack(data: bytes) -> dict[str, Any]:
    out: dict[str, Any] = orjson.loads(zstandard.ZstdDecompressor().decompress(data))
    return out
