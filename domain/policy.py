"""ContextPolicy (R17) and its compaction section (R7): defaults and publish-time
validation. Pure. A release whose policy fails here is not published (R7.7)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from schemas.errors import InvalidPolicy

PLATFORM_MAX_COMPACTION_CALLS = 16


@dataclass(frozen=True)
class CompactionPolicy:
    context_ratio: float | None = 0.80  # R7.1: EstimatedInput / InputBudget >= ratio
    user_turns: int | None = None  # R7.2
    model_steps: int | None = None  # R7.3
    target_context_ratio: float = 0.60  # R7.5: the goal, not a trigger
    max_compaction_calls: int = 4  # R7.6
    retry_growth_ratio: float = 0.05  # R7.6 / R9.5
    # R15.3: every job has a deadline; a check past it records the job expired and may
    # start another, so a lost request never leaves the session stuck.
    job_timeout_s: float = 120.0
    # R11.2/R11.8: the effective summary stays within this share of InputBudget; past it
    # the job rolls the parent summary and the new segments up into one summary.
    summary_max_ratio: float = 0.15


@dataclass(frozen=True)
class LargeResultSettings:
    """R10.3: results over ``inline_max_tokens`` are shown as a ``preview_chars`` view with
    a read-back reference."""

    inline_max_tokens: int = 4000
    preview_chars: int = 2000


@dataclass(frozen=True)
class ContextPolicy:
    api_version: str = "v1"
    recent_complete_groups: int = 2
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)
    large_result: LargeResultSettings = field(default_factory=LargeResultSettings)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ratio(name: str, v: Any, nullable: bool) -> float | None:
    if v is None:
        if nullable:
            return None
        raise InvalidPolicy(f"{name} is required", field=name, rule="required")
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < 1:
        raise InvalidPolicy(
            f"{name} must be a number in (0, 1)", field=name, rule="ratio_range", value=v
        )
    return float(v)


def _count(name: str, v: Any, nullable: bool, cap: int | None = None) -> int | None:
    if v is None:
        if nullable:
            return None
        raise InvalidPolicy(f"{name} is required", field=name, rule="required")
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise InvalidPolicy(
            f"{name} must be a positive integer", field=name, rule="positive_integer", value=v
        )
    if cap is not None and v > cap:
        raise InvalidPolicy(
            f"{name} must be at most the platform cap {cap}",
            field=name,
            rule="platform_cap",
            value=v,
            cap=cap,
        )
    return v


def _positive(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
        raise InvalidPolicy(
            f"{name} must be a positive number", field=name, rule="positive_number", value=v
        )
    return float(v)


def validate_compaction(raw: Mapping[str, Any]) -> CompactionPolicy:
    """Every rule of R7.7; unknown fields are refused so that a typo is not silently
    ignored."""
    defaults = asdict(CompactionPolicy())
    unknown = set(raw) - set(defaults)
    if unknown:
        raise InvalidPolicy(
            f"unknown compaction fields: {sorted(unknown)}",
            rule="unknown_field",
            fields=sorted(unknown),
        )
    v = defaults | dict(raw)
    p = CompactionPolicy(
        context_ratio=_ratio("context_ratio", v["context_ratio"], nullable=True),
        user_turns=_count("user_turns", v["user_turns"], nullable=True),
        model_steps=_count("model_steps", v["model_steps"], nullable=True),
        target_context_ratio=_ratio(
            "target_context_ratio", v["target_context_ratio"], nullable=False
        )
        or 0.0,
        max_compaction_calls=_count(
            "max_compaction_calls",
            v["max_compaction_calls"],
            nullable=False,
            cap=PLATFORM_MAX_COMPACTION_CALLS,
        )
        or 0,
        retry_growth_ratio=_ratio("retry_growth_ratio", v["retry_growth_ratio"], nullable=False)
        or 0.0,
        job_timeout_s=_positive("job_timeout_s", v["job_timeout_s"]),
        summary_max_ratio=_ratio("summary_max_ratio", v["summary_max_ratio"], nullable=False)
        or 0.0,
    )
    if p.context_ratio is None and p.user_turns is None and p.model_steps is None:
        raise InvalidPolicy(
            "at least one compaction trigger must be enabled", rule="no_trigger_enabled"
        )
    if p.context_ratio is not None and p.target_context_ratio >= p.context_ratio:
        raise InvalidPolicy(
            "target_context_ratio must be below context_ratio",
            field="target_context_ratio",
            rule="target_not_below_trigger",
            target=p.target_context_ratio,
            trigger=p.context_ratio,
        )
    return p


def validate_policy(raw: Mapping[str, Any] | None) -> ContextPolicy:
    raw = dict(raw or {})
    known = {"api_version", "recent_complete_groups", "compaction", "large_result"}
    unknown = set(raw) - known
    if unknown:
        raise InvalidPolicy(
            f"unknown policy fields: {sorted(unknown)}",
            rule="unknown_field",
            fields=sorted(unknown),
        )
    groups = (
        _count("recent_complete_groups", raw.get("recent_complete_groups", 2), nullable=False) or 0
    )
    return ContextPolicy(
        api_version=str(raw.get("api_version", "v1")),
        recent_complete_groups=groups,
        compaction=validate_compaction(raw.get("compaction") or {}),
        large_result=validate_large_result(raw.get("large_result") or {}),
    )


def validate_large_result(raw: Mapping[str, Any]) -> LargeResultSettings:
    defaults = asdict(LargeResultSettings())
    unknown = set(raw) - set(defaults)
    if unknown:
        raise InvalidPolicy(
            f"unknown large_result fields: {sorted(unknown)}",
            rule="unknown_field",
            fields=sorted(unknown),
        )
    v = defaults | dict(raw)
    return LargeResultSettings(
        inline_max_tokens=_count("inline_max_tokens", v["inline_max_tokens"], nullable=False) or 0,
        preview_chars=_count("preview_chars", v["preview_chars"], nullable=False) or 0,
    )
