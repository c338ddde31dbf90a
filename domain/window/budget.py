"""Budget arithmetic (R6): InputBudget from a model profile, itemized estimates. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from domain.caching.rules import CACHE_TTLS, DEFAULT_MIN_TOKENS, DEFAULT_TTL, CacheRules
from domain.pricing import ModelPrices
from schemas.answers.prepared import CalibrationState
from schemas.errors import ContextBudgetExceeded, InvalidPolicy
from schemas.limits import MAX_ID_LEN, MAX_INT32, MAX_KEY_LEN

# A model's calibration (provider-reported input tokens over our estimate, smoothed per
# model: ``calibrate``) is the record the budget report and the drift answer publish.
Calibration = CalibrationState

CATEGORIES = (
    "instructions",
    "skills",
    "tool_schemas",
    "task",
    "state",
    "history",
    "interactions",
    "tool_results",
    "material",
    "envelope",
)
REQUIRED_CATEGORIES = ("instructions", "skills", "tool_schemas", "task", "envelope_required")


@dataclass(frozen=True)
class ModelProfile:
    """What the platform has confirmed about a model. Unknown capacity is a configuration
    error (R6.5): it is never guessed from the model name."""

    name: str
    context_capacity: int
    output_reserve: int
    safety_margin: int
    platform_limit: int | None = None
    input_limit: int | None = None
    counting: str = "cl100k_base"  # a tiktoken encoding, or "estimate"
    message_overhead: int = 4  # envelope tokens per message (role, separators)
    provider_format: str = "openai_chat"
    prices: ModelPrices | None = None  # per million tokens; None: calls are not priced
    # The provider's prompt cache for this model (docs/prompt-caching.md): the shortest
    # prefix it caches (Anthropic: 1,024, 2,048 or 4,096 by model family) and how long a
    # written entry lives ("5m" or "1h": rendered on Anthropic's marks, 1h writes cost 2x).
    cache_min_tokens: int = DEFAULT_MIN_TOKENS
    cache_ttl: str = DEFAULT_TTL

    def __post_init__(self) -> None:
        # A profile read back from JSON (a prepared context's cache entry) has its prices
        # as the object they were written as.
        if isinstance(self.prices, Mapping):
            object.__setattr__(self, "prices", ModelPrices.from_dict(self.prices))

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> ModelProfile:
        if not d.get("context_capacity"):
            raise InvalidPolicy(
                "model profile needs a confirmed context_capacity (R6.5)", field="context_capacity"
            )
        allowed = set(ModelProfile.__dataclass_fields__)
        unknown = set(d) - allowed
        if unknown:
            raise InvalidPolicy(f"unknown model profile fields: {sorted(unknown)}")
        prices = d.get("prices")
        if prices is not None and not isinstance(prices, Mapping):
            raise InvalidPolicy(
                "model_profile.prices must be an object", field="prices", value=prices
            )
        wrong = sorted(k for k, v in d.items() if k != "prices" and not _profile_value_ok(k, v))
        if wrong:
            raise InvalidPolicy(
                f"model profile fields of the wrong type or out of range: {wrong}", fields=wrong
            )
        try:
            prof = ModelProfile(
                **{k: v for k, v in d.items() if k in allowed and k != "prices"},
                prices=None if prices is None else ModelPrices.from_dict(prices),
            )
        except TypeError as exc:
            raise InvalidPolicy(f"invalid model profile: {exc}") from exc
        prof.input_budget()  # validates the arithmetic
        return prof

    @property
    def cache_rules(self) -> CacheRules:
        return CacheRules(self.cache_min_tokens, self.cache_ttl)

    def input_budget(self) -> int:
        """R6.1: min(input limit, C - R - S) with C = min(capacity, platform limit)."""
        for name in ("context_capacity", "output_reserve", "safety_margin"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise InvalidPolicy(f"{name} must be a non-negative integer", field=name)
        c = self.context_capacity
        if self.platform_limit is not None:
            c = min(c, self.platform_limit)
        budget = c - self.output_reserve - self.safety_margin
        if self.input_limit is not None:
            budget = min(budget, self.input_limit)
        if budget <= 0:
            raise InvalidPolicy(
                "model profile leaves no input budget",
                capacity=c,
                output_reserve=self.output_reserve,
                safety_margin=self.safety_margin,
            )
        return budget


def _profile_value_ok(name: str, value: Any) -> bool:
    """Sizes are integers in 0..2^31-1 (a bool is not one); labels are bounded strings
    (the name keys calibration rows); the cache lifetime is one the providers offer."""
    if name in ("name", "counting", "provider_format"):
        return isinstance(value, str) and len(value) <= (
            MAX_ID_LEN if name == "name" else MAX_KEY_LEN
        )
    if name == "cache_ttl":
        return isinstance(value, str) and value in CACHE_TTLS
    if value is None and name in ("platform_limit", "input_limit"):
        return True
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INT32


def counting_label(requested: str, available: str) -> str:
    """R6.4: the counting method a report names. ``requested`` is the profile's
    ``counting``: an encoding name, ``file:<path>`` of a local .tiktoken file, or
    ``estimate`` when the model's own tokenizer is not available — then our tokenizer is a
    proxy, the report says so, and the safety margin must absorb the difference.
    ``available`` is what this deployment counts with (records are counted at ingest with
    it, so a profile cannot ask for another)."""
    if requested == "estimate":
        return f"estimate:proxy={available}"
    if available in (f"tiktoken:{requested}", f"tiktoken_{requested}"):
        return available
    raise InvalidPolicy(
        f"counting method {requested!r} is not available: this deployment counts with"
        f" {available} (set ALC_TIKTOKEN_FILE for a local .tiktoken file, or use 'estimate')",
        field="counting",
        rule="counting_unavailable",
        available=available,
    )


@dataclass(frozen=True)
class BudgetReport:
    model: str
    input_budget: int
    estimated_input: int
    items: Mapping[str, int]
    required: int
    counting_method: str
    safety_margin: int
    output_reserve: int
    context_capacity: int
    ratio: float = field(default=0.0)
    calibration: Calibration | None = None

    @property
    def calibrated_input(self) -> int:
        """The estimate scaled by what the provider reported before — only ever upward, so
        calibration can make the check stricter, never looser (R6.4)."""
        if self.calibration is None or self.calibration.factor <= 1.0:
            return self.estimated_input
        return math.ceil(self.estimated_input * self.calibration.factor)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "input_budget": self.input_budget,
            "estimated_input": self.estimated_input,
            "items": dict(self.items),
            "required": self.required,
            "counting_method": self.counting_method,
            "safety_margin": self.safety_margin,
            "output_reserve": self.output_reserve,
            "context_capacity": self.context_capacity,
            "ratio": round(self.ratio, 6),
        } | (
            {
                "calibration": self.calibration.to_dict(),
                "calibrated_input": self.calibrated_input,
            }
            if self.calibration is not None
            else {}
        )


def calibrate(cal: Calibration, estimated: int, actual: int, alpha: float = 0.2) -> Calibration:
    """Fold one observation in. The first sample sets the factor; later ones move it by
    ``alpha``, so one odd response does not swing every later check."""
    if estimated <= 0 or actual <= 0:
        return cal
    ratio = actual / estimated
    factor = ratio if cal.samples == 0 else (1 - alpha) * cal.factor + alpha * ratio
    return Calibration(factor, cal.samples + 1, ratio - 1.0)


def make_report(
    profile: ModelProfile,
    items: Mapping[str, int],
    required: int,
    counting_method: str,
    calibration: Calibration | None = None,
) -> BudgetReport:
    budget = profile.input_budget()
    total = sum(items.values())
    return BudgetReport(
        model=profile.name,
        input_budget=budget,
        estimated_input=total,
        items=dict(items),
        required=required,
        counting_method=counting_method,
        safety_margin=profile.safety_margin,
        output_reserve=profile.output_reserve,
        context_capacity=profile.context_capacity,
        ratio=total / budget,
        calibration=calibration,
    )


def enforce(report: BudgetReport) -> None:
    """R6.3/R9.7/R10.4: send only if the estimate fits. Required content alone over the
    budget is a precise error; nothing is cut silently."""
    if report.required > report.input_budget:
        raise ContextBudgetExceeded(
            "required content alone exceeds the input budget",
            reason="required_over_budget",
            **report.to_dict(),
        )
    if report.calibrated_input > report.input_budget:
        raise ContextBudgetExceeded(
            "context exceeds the input budget; history must be compacted first",
            reason="history_over_budget",
            **report.to_dict(),
        )
