"""What text of a record counts for tokens (pure). Counted once at ingest, by hash."""

from __future__ import annotations

import hashlib

from schemas.contracts import (
    AssistantMessagePayload,
    ContextEvent,
    ToolCallPayload,
    ToolOutcomePayload,
)


def token_text(ev: ContextEvent) -> str | None:
    """The text whose tokens the model will see for this record; None when the content
    is a blob reference (its count was stored with the blob)."""
    if ev.content.inline is None:
        return None
    p = ev.payload
    parts = [ev.content.inline]
    if isinstance(p, AssistantMessagePayload):
        for call in p.tool_calls:
            parts.append(call.name)
            parts.append(call.arguments_json)
    elif isinstance(p, ToolCallPayload):
        parts.extend((p.name, p.arguments_json))
    elif isinstance(p, ToolOutcomePayload):
        parts.append(p.name)
    return "\n".join(parts)


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
