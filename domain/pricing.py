"""What a model call costs (pure): a model profile's prices and a call's usage
(``domain.usage``).

Prices are per **million** tokens and exact: a number or a decimal string with at most
six decimals, read as the decimal it is written as (a JSON number through the shortest
decimal that reads back as the same float) and never rounded. Such a price is a whole
number of pico-units (10^-12 of the currency) per token, so a profile's ``TokenRates``
are integers and a call's cost is an exact integer: sums over any number of calls, in
any order, never drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from domain.usage import Usage
from schemas.errors import InvalidPolicy

PER = 1_000_000  # prices are per million tokens
PICO = 10**12  # costs are integers of a pico-unit of the currency
PICOS_PER_PRICE_UNIT = PICO // PER  # a price of 1 per million tokens, per token
PRICE_DECIMALS = 6
MAX_PRICE = Decimal(10**6)
PRICE_FIELDS = ("input", "cached_input", "cache_write", "cache_write_1h", "output")
# A write kept in the cache for an hour, on a profile without its own ``cache_write_1h``
# price: twice the input price (Anthropic's, the providers that report such writes).
WRITE_1H_FACTOR = 2

Price = Decimal | int | float | str


@dataclass(frozen=True)
class TokenRates:
    """A profile's prices as integer pico-units of the currency per token."""

    input: int
    cached: int
    write: int
    write_1h: int
    output: int


@dataclass(frozen=True, init=False)
class ModelPrices:
    """Prices per million tokens, exact decimals. A cached-input or cache-write price
    left out costs as fresh input (a provider without a cache discount or write premium);
    a 1-hour cache write left out costs ``WRITE_1H_FACTOR`` times the input."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None
    cache_write: Decimal | None
    currency: str
    cache_write_1h: Decimal | None

    def __init__(
        self,
        input: Price,
        output: Price,
        cached_input: Price | None = None,
        cache_write: Price | None = None,
        currency: str = "USD",
        cache_write_1h: Price | None = None,
    ) -> None:
        put = object.__setattr__
        put(self, "input", exact_price(input, "input"))
        put(self, "output", exact_price(output, "output"))
        put(self, "cached_input", _optional(cached_input, "cached_input"))
        put(self, "cache_write", _optional(cache_write, "cache_write"))
        put(self, "cache_write_1h", _optional(cache_write_1h, "cache_write_1h"))
        put(self, "currency", currency)

    @staticmethod
    def from_dict(d: Mapping[str, Any], at: str = "model_profile.prices") -> ModelPrices:
        unknown = sorted(set(d) - {*PRICE_FIELDS, "currency"})
        if unknown:
            raise InvalidPolicy(
                f"unknown price fields: {unknown}", field=unknown[0], json_path=f"{at}.{unknown[0]}"
            )
        for name in ("input", "output"):
            if d.get(name) is None:
                raise InvalidPolicy(
                    f"{at}.{name} is required", field=name, json_path=f"{at}.{name}"
                )
        prices = {
            name: exact_price(d[name], name, at)
            for name in PRICE_FIELDS
            if d.get(name) is not None  # an optional price written as null is left out
        }
        currency = d.get("currency", "USD")
        if not isinstance(currency, str) or not 1 <= len(currency) <= 8:
            raise InvalidPolicy(f"{at}.currency must be a short code", field="currency")
        return ModelPrices(currency=currency, **prices)

    def to_dict(self) -> dict[str, Any]:
        """JSON numbers that read back as the same decimals (``from_dict``)."""
        return {
            "input": _number(self.input),
            "cached_input": _number(self.cached_input),
            "cache_write": _number(self.cache_write),
            "cache_write_1h": _number(self.cache_write_1h),
            "output": _number(self.output),
            "currency": self.currency,
        }

    def rates(self) -> TokenRates:
        """The exact integer pico-units per token of each kind."""
        return TokenRates(
            input=_picos(self.input),
            cached=_picos(self.input if self.cached_input is None else self.cached_input),
            write=_picos(self.input if self.cache_write is None else self.cache_write),
            write_1h=_picos(
                self.input * WRITE_1H_FACTOR if self.cache_write_1h is None else self.cache_write_1h
            ),
            output=_picos(self.output),
        )


def exact_price(v: Any, name: str, at: str = "model_profile.prices") -> Decimal:
    """A price as the decimal it is written as; InvalidPolicy (with the field's JSON
    path) unless it is a non-negative number under a million with at most six decimals."""
    d = _decimal(v)
    if d is None or not 0 <= d < MAX_PRICE or (d * PICOS_PER_PRICE_UNIT) % 1 != 0:
        raise InvalidPolicy(
            f"{at}.{name} must be a non-negative number per million tokens"
            f" with at most {PRICE_DECIMALS} decimals",
            field=name,
            json_path=f"{at}.{name}",
            value=v if isinstance(v, int | float | str) else str(v),
        )
    return d


def _decimal(v: Any) -> Decimal | None:
    try:
        if isinstance(v, bool):
            return None
        if isinstance(v, Decimal | int):
            d = Decimal(v)
        elif isinstance(v, float):
            d = Decimal(repr(v))  # the shortest decimal that reads back as this float
        elif isinstance(v, str) and len(v) <= 32:
            d = Decimal(v.strip())
        else:
            return None
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def _optional(v: Price | None, name: str) -> Decimal | None:
    return None if v is None else exact_price(v, name)


def _picos(price: Decimal) -> int:
    return int(price * PICOS_PER_PRICE_UNIT)


def _number(d: Decimal | None) -> int | float | None:
    if d is None:
        return None
    return int(d) if d == d.to_integral_value() else float(d)


def cost_picos(usage: Usage, prices: ModelPrices) -> int:
    """The call's exact price in pico-units of ``prices.currency`` (see ``PICO``): each
    kind of token at its own rate, 1-hour cache writes at theirs."""
    r = prices.rates()
    short_writes = usage.cache_write_tokens - usage.cache_write_1h_tokens
    return (
        usage.fresh_input_tokens * r.input
        + usage.cached_input_tokens * r.cached
        + short_writes * r.write
        + usage.cache_write_1h_tokens * r.write_1h
        + usage.output_tokens * r.output
    )


def format_cost(picos: int) -> str:
    """Pico-units as a plain decimal amount of the currency ("0.00183")."""
    amount = (Decimal(picos) / PICO).normalize()
    return f"{amount:f}"


def cost_dict(usage: Usage, prices: ModelPrices) -> dict[str, Any]:
    """What a priced call records beside its tokens."""
    picos = cost_picos(usage, prices)
    return {"cost": format_cost(picos), "cost_picos": picos, "currency": prices.currency}
