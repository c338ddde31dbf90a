"""A model call's tokens by kind (pure): each provider's usage shape mapped to one
``Usage``, or refused.

Providers report usage differently. OpenAI's ``prompt_tokens`` includes the cached
tokens and ``completion_tokens`` the reasoning tokens; Anthropic's and Bedrock's input
count excludes cache reads and writes; Gemini's ``promptTokenCount`` includes the cached
content, while its thinking tokens (``thoughtsTokenCount``) are beside the candidates'.
``Usage`` holds them one way: fresh, cached and cache-write input are disjoint,
``output_tokens`` includes ``reasoning_tokens``, and ``cache_write_tokens`` includes
the writes kept for an hour (``cache_write_1h_tokens``, priced at their own rate).

A shape is recognized by keys only it uses (``SHAPES``); every other key of a report
must be one that shape is known to carry beside its counts (``total_tokens``, a
service tier, a per-modality breakdown). What cannot be attributed to a kind — keys of
two shapes, a key no shape knows, a total without its parts — is refused with
``invalid_usage`` rather than stored as 0 tokens and 0 cost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from schemas.errors import InvalidRequest

MAX_COUNT = 2**53


@dataclass(frozen=True)
class Usage:
    """One call's tokens by kind; the input kinds are disjoint."""

    fresh_input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0  # all writes, the 1-hour ones included
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_1h_tokens: int = 0  # of cache_write_tokens: kept for an hour

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.fresh_input_tokens + other.fresh_input_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.output_tokens + other.output_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.cache_write_1h_tokens + other.cache_write_1h_tokens,
        )

    @property
    def input_tokens(self) -> int:
        """All input the provider read, cached or not."""
        return self.fresh_input_tokens + self.cached_input_tokens + self.cache_write_tokens

    @property
    def cache_share(self) -> float | None:
        """The share of input read from the cache; None for a call without input."""
        total = self.input_tokens
        return None if total == 0 else self.cached_input_tokens / total

    def to_dict(self) -> dict[str, int]:
        """The neutral shape (``input_tokens`` is all input: what calibration compares);
        ``cache_write_1h_tokens`` only when there are some."""
        out = {
            "input_tokens": self.input_tokens,
            "fresh_input_tokens": self.fresh_input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }
        if self.cache_write_1h_tokens:
            out["cache_write_1h_tokens"] = self.cache_write_1h_tokens
        return out

    @staticmethod
    def openai(
        prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0, reasoning: int = 0
    ) -> Usage:
        """From OpenAI's usage: ``prompt_tokens`` includes ``cached_tokens``."""
        cached = min(cached_tokens, prompt_tokens)
        return Usage(
            fresh_input_tokens=prompt_tokens - cached,
            cached_input_tokens=cached,
            output_tokens=completion_tokens,
            reasoning_tokens=reasoning,
        )

    @staticmethod
    def anthropic(
        input_tokens: int,
        output_tokens: int,
        cache_read_input_tokens: int = 0,
        cache_creation_input_tokens: int = 0,
        cache_write_1h_tokens: int = 0,
    ) -> Usage:
        """From Anthropic's usage: ``input_tokens`` excludes cache reads and writes."""
        return Usage(
            fresh_input_tokens=input_tokens,
            cached_input_tokens=cache_read_input_tokens,
            cache_write_tokens=cache_creation_input_tokens,
            output_tokens=output_tokens,
            cache_write_1h_tokens=cache_write_1h_tokens,
        )


@dataclass(frozen=True)
class Shape:
    """One provider's usage object: the keys that tell it apart, the keys it may carry
    beside its counts without changing them, and how it maps to ``Usage``."""

    name: str
    markers: frozenset[str]
    informational: frozenset[str]
    read: Callable[[Mapping[str, Any]], Usage]


def _openai_chat(raw: Mapping[str, Any]) -> Usage:
    return _openai(raw, "prompt_tokens", "completion_tokens", "prompt_tokens_details")


def _openai_responses(raw: Mapping[str, Any]) -> Usage:
    """OpenAI's Responses API; without details also the plain ``input_tokens`` /
    ``output_tokens`` of any provider that caches nothing."""
    return _openai(raw, "input_tokens", "output_tokens", "input_tokens_details")


def _openai(raw: Mapping[str, Any], inp: str, out: str, details: str) -> Usage:
    prompt = _count(raw, inp)
    cached = _count(_details(raw, details), "cached_tokens", f"{details}.")
    out_details = "completion_tokens_details" if inp == "prompt_tokens" else "output_tokens_details"
    reasoning = _count(_details(raw, out_details), "reasoning_tokens", f"{out_details}.")
    completion = _count(raw, out)
    if cached > prompt:
        _bad(f"{details}.cached_tokens", cached, f"more cached tokens than {inp}")
    if reasoning > completion:
        _bad(f"{out_details}.reasoning_tokens", reasoning, f"more reasoning tokens than {out}")
    return Usage.openai(prompt, completion, cached, reasoning)


def _anthropic(raw: Mapping[str, Any]) -> Usage:
    """``cache_creation`` splits the writes by lifetime (``ephemeral_5m_input_tokens``,
    ``ephemeral_1h_input_tokens``); without ``cache_creation_input_tokens`` their sum is
    the writes, with it they must add up to it."""
    split = _details(raw, "cache_creation")
    unknown = sorted(set(split) - {"ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"})
    if unknown:
        _bad(f"cache_creation.{unknown[0]}", split[unknown[0]], "is no cache lifetime")
    short = _count(split, "ephemeral_5m_input_tokens", "cache_creation.")
    long = _count(split, "ephemeral_1h_input_tokens", "cache_creation.")
    writes = _count(raw, "cache_creation_input_tokens", default=short + long)
    if split and short + long != writes:
        _bad("cache_creation", dict(split), "does not add up to cache_creation_input_tokens")
    return Usage.anthropic(
        _count(raw, "input_tokens"),
        _count(raw, "output_tokens"),
        _count(raw, "cache_read_input_tokens"),
        writes,
        long,
    )


def _gemini(raw: Mapping[str, Any]) -> Usage:
    """Gemini's ``usageMetadata``: the prompt includes the cached content; tool-use prompt
    tokens are input beside it; thinking tokens are output beside the candidates'."""
    prompt = _count(raw, "promptTokenCount")
    cached = _count(raw, "cachedContentTokenCount")
    if cached > prompt:
        _bad("cachedContentTokenCount", cached, "more cached tokens than promptTokenCount")
    thoughts = _count(raw, "thoughtsTokenCount")
    return Usage(
        fresh_input_tokens=prompt - cached + _count(raw, "toolUsePromptTokenCount"),
        cached_input_tokens=cached,
        output_tokens=_count(raw, "candidatesTokenCount") + thoughts,
        reasoning_tokens=thoughts,
    )


def _bedrock(raw: Mapping[str, Any]) -> Usage:
    """Bedrock Converse: ``inputTokens`` excludes cache reads and writes, as Anthropic's;
    ``cacheDetails`` splits the writes by TTL (``5m`` | ``1h``)."""
    writes = _count(raw, "cacheWriteInputTokens")
    long = 0
    details = raw.get("cacheDetails") or []
    if not isinstance(details, list):
        _bad("cacheDetails", details, "must be a list")
    for i, d in enumerate(details):
        at = f"cacheDetails.{i}."
        if not isinstance(d, Mapping) or d.get("ttl") not in ("5m", "1h"):
            _bad(f"cacheDetails.{i}", d, "must be {ttl: 5m | 1h, inputTokens}")
        long += _count(d, "inputTokens", at) if d["ttl"] == "1h" else 0
    if long > writes:
        _bad("cacheDetails", details, "more 1h writes than cacheWriteInputTokens")
    return Usage.anthropic(
        _count(raw, "inputTokens"),
        _count(raw, "outputTokens"),
        _count(raw, "cacheReadInputTokens"),
        writes,
        long,
    )


def _neutral(raw: Mapping[str, Any]) -> Usage:
    """``Usage.to_dict``: the input kinds disjoint; ``input_tokens`` is all input."""
    cached = _count(raw, "cached_input_tokens")
    write = _count(raw, "cache_write_tokens")
    long = _count(raw, "cache_write_1h_tokens")
    if long > write:
        _bad("cache_write_1h_tokens", long, "more 1h writes than cache_write_tokens")
    if "fresh_input_tokens" in raw:
        fresh = _count(raw, "fresh_input_tokens")
        if "input_tokens" in raw and _count(raw, "input_tokens") != fresh + cached + write:
            _bad("input_tokens", raw["input_tokens"], "is not fresh + cached + cache write")
    else:
        fresh = _count(raw, "input_tokens") - cached - write
        if fresh < 0:
            _bad("input_tokens", raw.get("input_tokens"), "is less than cached + cache write")
    reasoning = _count(raw, "reasoning_tokens")
    output = _count(raw, "output_tokens")
    if reasoning > output:
        _bad("reasoning_tokens", reasoning, "more reasoning tokens than output_tokens")
    return Usage(fresh, cached, write, output, reasoning, long)


def _shape(
    name: str, markers: str, informational: str, read: Callable[[Mapping[str, Any]], Usage]
) -> Shape:
    return Shape(name, frozenset(markers.split()), frozenset(informational.split()), read)


# Tried in order; the last one (plain input/output) only when no other's markers appear.
SHAPES: tuple[Shape, ...] = (
    _shape(
        "openai_chat",
        "prompt_tokens completion_tokens prompt_tokens_details completion_tokens_details",
        "total_tokens",
        _openai_chat,
    ),
    _shape(
        "anthropic",
        "cache_read_input_tokens cache_creation_input_tokens cache_creation",
        "input_tokens output_tokens service_tier server_tool_use",
        _anthropic,
    ),
    _shape(
        "gemini",
        "promptTokenCount candidatesTokenCount cachedContentTokenCount thoughtsTokenCount"
        " toolUsePromptTokenCount",
        "totalTokenCount promptTokensDetails candidatesTokensDetails cacheTokensDetails"
        " toolUsePromptTokensDetails trafficType",
        _gemini,
    ),
    _shape(
        "bedrock_converse",
        "inputTokens outputTokens cacheReadInputTokens cacheWriteInputTokens cacheDetails",
        "totalTokens",
        _bedrock,
    ),
    _shape(
        "neutral",
        "fresh_input_tokens cached_input_tokens cache_write_tokens cache_write_1h_tokens"
        " reasoning_tokens",
        "input_tokens output_tokens",
        _neutral,
    ),
    _shape(
        "openai_responses",
        "input_tokens output_tokens input_tokens_details output_tokens_details",
        "total_tokens",
        _openai_responses,
    ),
)


def parse_usage(raw: Mapping[str, Any]) -> Usage | None:
    """A provider's usage as the runtime reports it, normalized once (``SHAPES``). None
    when nothing is reported. Negative or non-integer counts, keys of two shapes, a key
    the shape does not carry, or no token count of any shape raise InvalidRequest
    ``invalid_usage`` naming the field."""
    if not raw:
        return None
    found = [s for s in SHAPES[:-1] if s.markers & raw.keys()]
    if len(found) > 1:
        foreign = sorted(found[1].markers & raw.keys())
        _refuse(f"usage mixes the {found[0].name} shape with {foreign}", foreign[0])
    shape = found[0] if found else SHAPES[-1]
    if not shape.markers & raw.keys():
        _refuse(
            "usage has no token counts of a known shape (a total alone cannot be priced)",
            sorted(raw)[0],
        )
    unknown = sorted(raw.keys() - shape.markers - shape.informational)
    if unknown:
        _refuse(f"usage key {unknown[0]!r} is not part of the {shape.name} shape", unknown[0])
    return shape.read(raw)


def _refuse(message: str, key: str) -> NoReturn:
    raise InvalidRequest(message, reason="invalid_usage", field=f"usage.{key}")


def _details(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    d = raw.get(key)
    if d is None:
        return {}
    if not isinstance(d, Mapping):
        _bad(key, d, "must be an object")
    return d


def _count(raw: Mapping[str, Any], key: str, prefix: str = "", default: int = 0) -> int:
    v = raw.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_COUNT:
        _bad(prefix + key, v, "must be a non-negative integer")
    return int(v)


def _bad(field: str, value: Any, why: str) -> NoReturn:
    raise InvalidRequest(
        f"usage.{field} {why}", reason="invalid_usage", field=f"usage.{field}", value=value
    )
