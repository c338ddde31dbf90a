"""A forked summarizer call in the Anthropic Messages format (issue 39 item 3; the
agent's request is found and re-rendered by ``domain.summarizer.fork``).

Anthropic caches a request's prefix — tools, then system, then messages — up to a block
marked ``cache_control``. The fork keeps the agent's request as Prepare rendered it:
tools, system, every message and every mark. The instruction goes after its last block:
a text block at the end of the last user message when the conversation ends with the
user (tool results travel in user turns), else a new user message after the
assistant's. Every block up to the last mark is then the agent's, byte for byte, so each
mark finds the entry the agent's call wrote; the instruction carries no mark (it is read
once, never again).

No ``tool_choice``: Anthropic documents that a change of ``tool_choice`` invalidates the
cached messages (tools and system stay valid), so ``"none"`` would write the whole
covered history again at the write price — dearer than not forking. The agent's
request carries none (Prepare renders none), so neither does the fork. R11.3 holds all
the same: the summarizer runs no tool. The instruction tells the model to call none,
and of its answer only the text is read; a ``tool_use`` block is never executed
(``services.summarizers.anthropic_messages``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FORMAT = "anthropic_messages"


def forked_messages_body(
    agent: Mapping[str, Any], instruction: str, model: str, max_tokens: int
) -> dict[str, Any]:
    """``agent`` (a rendered Messages request: messages, system, tools) continued by
    ``instruction``, then the call's own settings (model, output bound), neither of
    which is in the prefix. No sampling setting: the Messages API the SDK speaks (version
    2026-10-21) refuses ``temperature``."""
    turns = list(agent["messages"])
    block = {"type": "text", "text": instruction}
    last = turns[-1] if turns else None
    if last is not None and last["role"] == "user" and isinstance(last["content"], list):
        # A copy of the last turn: the agent's body (the job's, reused per segment) stays.
        turns[-1] = {**last, "content": [*last["content"], block]}
    else:
        turns.append({"role": "user", "content": [block]})
    body = {"model": model, **agent, "messages": turns, "max_tokens": max_tokens}
    body["model"] = model  # the summarizer's, whatever the agent's request named
    return body
