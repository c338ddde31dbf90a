"""Provider-ready rendering of a PreparedContext: OpenAI Chat Completions,
OpenAI Responses input items and Anthropic Messages. Pure and deterministic — golden
files pin the exact JSON (tests/golden/providers/).

Our neutral messages keep tool groups whole (R5.1), so each format gets every call with
its result; state and summary blocks become text in the position they hold. Roles follow
authority by origin (``domain.authority``): only release-owned blocks are sent as
system/developer, whatever role a message was given upstream (R3.3, R12.4).

Each format is one module of ``domain.context.formats``, looked up by name in
``FORMAT_TABLE``. Prompt-cache hints (docs/prompt-caching.md): Anthropic requests carry
``cache_control`` breakpoints on the conversation's last block, the end of tools+system
and the summary (past the lookback, also after where the previous model call's request
ended; with a 1-hour lifetime, where the conversation stood at the newest user message),
none on a prefix shorter than the model's minimum (``domain.caching.breakpoints``); OpenAI
requests carry the ``prompt_cache_key`` the caller derives with ``prompt_cache_key`` and,
with the profile's ``24h`` lifetime, ``prompt_cache_retention``. All are functions of the
inputs and the profile only, so the bytes stay the same for the same inputs (R4.3).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from domain.caching.rules import CacheRules
from domain.context.formats.format import Message, RenderOptions
from domain.context.formats.table import FORMAT_TABLE

FORMATS = tuple(FORMAT_TABLE)  # the built-in formats


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
    fmt = FORMAT_TABLE.get(provider_format)
    if fmt is None:
        known = tuple(FORMAT_TABLE)
        raise ValueError(f"unknown provider format {provider_format!r}; one of {known}")
    return fmt.render(messages, tools, RenderOptions(cache_key, cache, tools_tokens))


__all__ = ["FORMATS", "Message", "prompt_cache_key", "render"]
