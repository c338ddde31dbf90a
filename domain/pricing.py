"""What a model call costs (pure): a model profile's prices and a provider's usage.

Providers report usage differently. OpenAI's ``prompt_tokens`` includes the cached
tokens (``prompt_tokens_details.cached_tokens``) and ``completion_tokens`` includes the
reasoning tokens; Anthropic's ``input_tokens`` excludes both cache reads
(``cache_read_input_tokens``) and cache writes (``cache_creation_input_tokens``).
``Usage`` holds them one way: fresh, cached and cache-write input are disjoint, and
``output_tokens`` includes ``reasoning_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NoReturn

from schemas.errors import InvalidPolicy, InvalidRequest

PER = 1_000_000  # prices are per million tokens
PRICE_FIELDS = ("input", "cached_input", "cache_write", "output")
# Costs are exact integers of a pico-unit (1e-12) of the currency: a price per million
# tokens with at most six decimals times a token count is a whole number of them, so
# sums over any number of calls, in any order, never drift.
PICO = 10**12
PRICE_DECIMALS = 6


@dataclass(frozen=True)
class ModelPrices:
    """Prices per million tokens. A cached-input or cache-write price left out costs as
    fresh input (a provider without a cache discount or write premium)."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None
    currency: str = "USD"

    @staticmethod
    def from_dict(d: Mapping[str, Any], at: str = "model_profile.prices") -> ModelPrices:
        unknown = sorted(set(d) - {*PRICE_FIELDS, "currency"})
        if unknown:
            raise InvalidPolicy(
                f"unknown price fields: {unknown}", field=unknown[0], json_path=f"{at}.{unknown[0]}"
            )
        for name in ("input", "output"):
            if name not in d:
                raise InvalidPolicy(
                    f"{at}.{name} is required", field=name, json_path=f"{at}.{name}"
                )
        for name in PRICE_FIELDS:
            v = d.get(name)
            if v is None:
                continue
            if not _price_ok(v):
                raise InvalidPolicy(
                    f"{at}.{name} must be a non-negative number per million tokens"
                    f" with at most {PRICE_DECIMALS} decimals",
                    field=name,
                    json_path=f"{at}.{name}",
                    value=v,
                )
        currency = d.get("currency", "USD")
        if not isinstance(currency, str) or not 1 <= len(currency) <= 8:
            raise InvalidPolicy(f"{at}.currency must be a short code", field="currency")
        return ModelPrices(
            input=float(d["input"]),
            output=float(d["output"]),
            cached_input=None if d.get("cached_input") is None else float(d["cached_input"]),
            cache_write=None if d.get("cache_write") is None else float(d["cache_write"]),
            currency=currency,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "cached_input": self.cached_input,
            "cache_write": self.cache_write,
            "output": self.output,
            "currency": self.currency,
        }

    @property
    def cached_rate(self) -> float:
        return self.input if self.cached_input is None else self.cached_input

    @property
    def write_rate(self) -> float:
        return self.input if self.cache_write is None else self.cache_write


def _price_ok(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1e6:
        return False
    exponent = _decimal(v).as_tuple().exponent
    return isinstance(exponent, int) and exponent >= -PRICE_DECIMALS


def _decimal(v: float) -> Decimal:
    """A price as written: the shortest decimal that reads back as the same float."""
    return Decimal(repr(float(v)))


@dataclass(frozen=True)
class Usage:
    """One call's tokens by kind; the input kinds are disjoint."""

    fresh_input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.fresh_input_tokens + other.fresh_input_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.output_tokens + other.output_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
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
        """The neutral shape (``input_tokens`` is all input: what calibration compares)."""
        return {
            "input_tokens": self.input_tokens,
            "fresh_input_tokens": self.fresh_input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }

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
    ) -> Usage:
        """From Anthropic's usage: ``input_tokens`` excludes cache reads and writes."""
        return Usage(
            fresh_input_tokens=input_tokens,
            cached_input_tokens=cache_read_input_tokens,
            cache_write_tokens=cache_creation_input_tokens,
            output_tokens=output_tokens,
        )


def cost(usage: Usage, prices: ModelPrices) -> float:
    """The call's price in ``prices.currency``."""
    total = (
        usage.fresh_input_tokens * prices.input
        + usage.cached_input_tokens * prices.cached_rate
        + usage.cache_write_tokens * prices.write_rate
        + usage.output_tokens * prices.output
    )
    return total / PER


def cost_picos(usage: Usage, prices: ModelPrices) -> int:
    """The call's exact price in pico-units of ``prices.currency`` (see ``PICO``)."""
    total = (
        usage.fresh_input_tokens * _decimal(prices.input)
        + usage.cached_input_tokens * _decimal(prices.cached_rate)
        + usage.cache_write_tokens * _decimal(prices.write_rate)
        + usage.output_tokens * _decimal(prices.output)
    )
    return int((total * (PICO // PER)).to_integral_value())


def format_cost(picos: int) -> str:
    """Pico-units as a plain decimal amount of the currency ("0.00183")."""
    amount = (Decimal(picos) / PICO).normalize()
    return f"{amount:f}"


def cost_dict(usage: Usage, prices: ModelPrices) -> dict[str, Any]:
    """What a priced call records beside its tokens."""
    picos = cost_picos(usage, prices)
    return {"cost": format_cost(picos), "cost_picos": picos, "currency": prices.currency}


# Provider usage shapes: the keys that tell them apart.
_OPENAI_CHAT = ("prompt_tokens", "completion_tokens")
_ANTHROPIC = ("cache_read_input_tokens", "cache_creation_input_tokens")
_NEUTRAL = ("fresh_input_tokens", "cached_input_tokens", "cache_write_tokens")


def parse_usage(raw: Mapping[str, Any]) -> Usage | None:
    """A provider's usage as the runtime reports it, normalized once: OpenAI Chat
    Completions (``prompt_tokens`` including ``prompt_tokens_details.cached_tokens``),
    the OpenAI Responses API (``input_tokens`` including
    ``input_tokens_details.cached_tokens``), Anthropic (``input_tokens`` beside
    ``cache_read_input_tokens`` and ``cache_creation_input_tokens``) or the neutral shape
    of ``Usage.to_dict`` (``input_tokens`` is all input). None when nothing is reported;
    keys of no shape (``total_tokens``, ``service_tier``, …) are ignored. Negative or
    non-integer counts, or a mix of shapes, raise InvalidRequest ``invalid_usage``."""
    if not raw:
        return None
    if any(k in raw for k in _OPENAI_CHAT):
        _only(raw, "openai_chat", (*_ANTHROPIC, *_NEUTRAL, "input_tokens"))
        return _openai(raw, "prompt_tokens", "completion_tokens", "prompt_tokens_details")
    if any(k in raw for k in _ANTHROPIC):
        _only(raw, "anthropic", (*_NEUTRAL, "input_tokens_details"))
        return Usage.anthropic(
            _count(raw, "input_tokens"),
            _count(raw, "output_tokens"),
            _count(raw, "cache_read_input_tokens"),
            _count(raw, "cache_creation_input_tokens"),
        )
    if any(k in raw for k in _NEUTRAL):
        _only(raw, "neutral", ("input_tokens_details",))
        return _neutral(raw)
    return _openai(raw, "input_tokens", "output_tokens", "input_tokens_details")


def _openai(raw: Mapping[str, Any], inp: str, out: str, details: str) -> Usage:
    """OpenAI's usage (Chat Completions or Responses); without details also the plain
    ``input_tokens`` / ``output_tokens`` of any provider that caches nothing."""
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


def _neutral(raw: Mapping[str, Any]) -> Usage:
    cached = _count(raw, "cached_input_tokens")
    write = _count(raw, "cache_write_tokens")
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
    return Usage(fresh, cached, write, output, reasoning)


def _only(raw: Mapping[str, Any], shape: str, foreign: tuple[str, ...]) -> None:
    mixed = sorted(k for k in foreign if k in raw)
    if mixed:
        raise InvalidRequest(
            f"usage mixes the {shape} shape with {mixed}",
            reason="invalid_usage",
            field=f"usage.{mixed[0]}",
        )


def _details(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    d = raw.get(key)
    if d is None:
        return {}
    if not isinstance(d, Mapping):
        _bad(key, d, "must be an object")
    return d


def _count(raw: Mapping[str, Any], key: str, prefix: str = "") -> int:
    v = raw.get(key, 0)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 2**53:
        _bad(prefix + key, v, "must be a non-negative integer")
    return int(v)


def _bad(field: str, value: Any, why: str) -> NoReturn:
    raise InvalidRequest(
        f"usage.{field} {why}", reason="invalid_usage", field=f"usage.{field}", value=value
    )
