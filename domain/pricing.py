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
from typing import Any

from schemas.errors import InvalidPolicy

PER = 1_000_000  # prices are per million tokens
PRICE_FIELDS = ("input", "cached_input", "cache_write", "output")


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
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1e6:
                raise InvalidPolicy(
                    f"{at}.{name} must be a non-negative number per million tokens",
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


@dataclass(frozen=True)
class Usage:
    """One call's tokens by kind; the input kinds are disjoint."""

    fresh_input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def input_tokens(self) -> int:
        """All input the provider read, cached or not."""
        return self.fresh_input_tokens + self.cached_input_tokens + self.cache_write_tokens

    @property
    def cache_share(self) -> float | None:
        """The share of input read from the cache; None for a call without input."""
        total = self.input_tokens
        return None if total == 0 else self.cached_input_tokens / total

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
