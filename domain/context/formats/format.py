"""What a provider format is (one module each under ``domain.context.formats``, registered
in ``table.FORMAT_TABLE``): its name, how a prepared context becomes its request
(``render``), the role each message reached the model with in a sent request
(``sent_roles``), and the prompt-cache lifetimes it offers (``cache_ttls``, the model
profile's ``cache_ttl``). Helpers every format uses live here too."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from domain.caching.rules import CacheRules

Message = dict[str, Any]
Tool = dict[str, Any]
EXTENDED_RETENTION = "24h"  # OpenAI's extended prompt cache retention


@dataclass(frozen=True)
class RenderOptions:
    """What a request carries besides messages and tools: the OpenAI ``prompt_cache_key``
    (None: none), the model's cache rules (None: not given; the defaults where a format
    needs them) and the tool schemas' token count (for cache breakpoints)."""

    cache_key: str | None = None
    cache: CacheRules | None = None
    tools_tokens: int | None = None


Render = Callable[[Sequence[Message], Sequence[Tool], RenderOptions], dict[str, Any]]
# (our messages, each one's speaking role, the request's ``messages``) -> the sent roles
SentRoles = Callable[[Sequence[Mapping[str, Any]], list[str], list[Any]], list[str]]


@dataclass(frozen=True)
class ProviderFormat:
    name: str
    render: Render
    sent_roles: SentRoles
    cache_ttls: tuple[str, ...]
    # ``gen_ai.provider.name`` of a call rendered in it; an OpenAI-compatible server is
    # reported as "openai", as the OpenAI instrumentations do
    provider: str
    # one request message per message, so hooks' additions are matched by their text
    messages_one_to_one: bool = False
    # the request marks its cache breakpoints (Anthropic): the provider caches only up to
    # a mark; without marks it caches every prefix on its own (OpenAI)
    cache_marks: bool = False


def schema(tool: Tool) -> dict[str, Any]:
    return tool.get("parameters") or tool.get("input_schema") or {"type": "object"}


def tool_text(m: Message) -> str:
    """The real status travels with the result (R3.5): an error is never shown as ok."""
    status = m.get("status", "ok")
    text = str(m.get("content", ""))
    return text if status == "ok" else f"[status: {status}] {text}"


def with_openai_cache(body: dict[str, Any], options: RenderOptions) -> dict[str, Any]:
    """The OpenAI formats' cache fields: ``prompt_cache_key`` and, with the profile's
    ``24h`` lifetime, ``prompt_cache_retention``."""
    if options.cache_key:
        body["prompt_cache_key"] = options.cache_key
    if options.cache is not None and options.cache.ttl == EXTENDED_RETENTION:
        body["prompt_cache_retention"] = EXTENDED_RETENTION
    return body
