"""OpenAI Responses input items ⇄ our events — pure, no I/O (the adapters in this package
call it). Used by the OpenAI Agents SDK session (``openai_agents.py``).

Items → ops: a user message is a question (or a supplement, before the run's first model
output); an assistant message and the function calls after it are one model result (one
``assistant_message`` event with its calls, call ids kept); a ``function_call_output`` is
the tool outcome of its call. Reasoning items and hosted-tool items are not recorded
(they are provider state, not conversation; see README).

Rendered input → items: our renderer's message items with one text part become the
"easy" form ``{"role", "content": str}`` (what the SDK and its session tests write);
function calls and outputs pass through with their call ids.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

Item = dict[str, Any]

# Item types that carry provider state rather than conversation (not recorded).
SKIPPED_TYPES = frozenset({"reasoning", "compaction", "item_reference"})


@dataclass(frozen=True)
class UserOp:
    text: str
    role: str = "user"


@dataclass(frozen=True)
class ModelOp:
    text: str
    calls: tuple[tuple[str, str, str], ...] = ()  # (call_id, name, arguments)


@dataclass(frozen=True)
class ToolOp:
    call_id: str
    output: str
    status: str = "ok"


Op = UserOp | ModelOp | ToolOp


def text_of(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content or []:
        if isinstance(part, dict):
            t = part.get("text", part.get("refusal"))
            parts.append(t if isinstance(t, str) else json.dumps(part, sort_keys=True))
        else:
            parts.append(str(part))
    return "\n".join(parts)


def _output_text(output: Any) -> str:
    return output if isinstance(output, str) else text_of(output)


@dataclass
class _Pending:
    texts: list[str] = field(default_factory=list)
    calls: list[tuple[str, str, str]] = field(default_factory=list)

    def op(self) -> ModelOp | None:
        if not self.texts and not self.calls:
            return None
        return ModelOp("\n".join(self.texts), tuple(self.calls))


def to_ops(items: Iterable[Item]) -> list[Op]:
    """Group items into the events they become, in order."""
    ops: list[Op] = []
    pending = _Pending()

    def flush() -> None:
        nonlocal pending
        op = pending.op()
        if op is not None:
            ops.append(op)
        pending = _Pending()

    for item in items:
        kind = item.get("type", "message")
        role = item.get("role")
        if kind in SKIPPED_TYPES:
            continue
        if kind == "message" and role == "assistant":
            if pending.calls:  # a new response after the previous one's calls
                flush()
            pending.texts.append(text_of(item.get("content")))
        elif kind == "function_call":
            pending.calls.append(
                (str(item["call_id"]), str(item["name"]), str(item.get("arguments") or "{}"))
            )
        elif kind == "function_call_output":
            flush()
            status = "error" if item.get("status") == "incomplete" else "ok"
            ops.append(ToolOp(str(item["call_id"]), _output_text(item.get("output")), status))
        elif kind == "message" and role in ("user", "system", "developer"):
            flush()
            ops.append(UserOp(text_of(item.get("content")), str(role)))
        else:  # hosted tools (web search, computer, ...): recorded as the model's text
            pending.texts.append(json.dumps(item, sort_keys=True, default=str))
    flush()
    return ops


def op_key(prefix: str, run_id: str, ordinal: int, op: Op) -> str:
    """An idempotency key from the op's content and its position in the run: the same
    add_items retried at the same position is a duplicate, a repeated text later is not."""
    body = json.dumps([run_id, ordinal, repr(op)], ensure_ascii=False)
    return f"{prefix}{hashlib.sha256(body.encode()).hexdigest()[:40]}"


def to_items(rendered: Sequence[Item]) -> list[Item]:
    """Our rendered ``input`` as the items a Session returns."""
    out: list[Item] = []
    for item in rendered:
        if item.get("type") == "message":
            out.append({"role": item["role"], "content": text_of(item.get("content"))})
        else:
            out.append(dict(item))
    return out


def last(items: list[Item], limit: int | None) -> list[Item]:
    """The latest ``limit`` items, never starting with a tool output whose call was cut
    off (a result without its call is what providers reject)."""
    if limit is None:
        return items
    if limit <= 0:
        return []
    tail = items[-limit:]
    calls = {i.get("call_id") for i in tail if i.get("type") == "function_call"}
    return [i for i in tail if i.get("type") != "function_call_output" or i.get("call_id") in calls]
