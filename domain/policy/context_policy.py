"""ContextPolicy (R17) and its compaction section (R7): platform defaults, an agent's
overrides, and publish-time validation. Pure. A release whose policy fails here is not
published (R7.7).

The defaults are in ``schemas/policy_defaults.py`` (domain/policy/defaults.py); the
sections R17 adds are in domain/policy/sections.py; every rule names the field path and a
stable rule code (domain/policy/rules.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

from domain.policy import rules
from domain.policy.defaults import (
    Provenance,
    merge,
    merge_policy,
    platform_defaults,
    section_defaults,
)
from domain.policy.sections import (
    ActiveSkillPolicy,
    ChildTransferPolicy,
    HookBinding,
    PurposeProfiles,
    RetentionRules,
    build_active_skills,
    build_child_transfer,
    build_hook_bindings,
    build_purpose_profiles,
    build_retention,
)
from schemas.errors import InvalidPolicy

PLATFORM_MAX_COMPACTION_CALLS = 16
Rollup = Literal["auto", "summarizer", "fit"]
ROLLUPS: tuple[Rollup, ...] = ("auto", "summarizer", "fit")
ROLLUP_FIT_SHARE = 0.5  # a ``fit`` roll-up leaves room for the next jobs' new entries
_P = platform_defaults()
_C = _P["compaction"]
_L = _P["large_result_policy"]


@dataclass(frozen=True)
class CompactionPolicy:
    context_ratio: float | None = _C["context_ratio"]  # R7.1: EstimatedInput / InputBudget
    user_turns: int | None = _C["user_turns"]  # R7.2
    model_steps: int | None = _C["model_steps"]  # R7.3
    target_context_ratio: float = _C["target_context_ratio"]  # R7.5: the goal, not a trigger
    max_compaction_calls: int = _C["max_compaction_calls"]  # R7.6
    retry_growth_ratio: float = _C["retry_growth_ratio"]  # R7.6 / R9.5
    # R15.3: every job has a deadline; a check past it records the job expired and may
    # start another, so a lost request never leaves the session stuck.
    job_timeout_s: float = _C["job_timeout_s"]
    # R11.2/R11.8: the effective summary stays within this share of InputBudget; past it
    # the job rolls the parent summary and the new segments up into one summary.
    summary_max_ratio: float = _C["summary_max_ratio"]
    # R11.8: how a summary over that bound is condensed (``ROLLUPS``): ``summarizer`` asks
    # the summarizer to condense it (a billed call with a model summarizer); ``fit`` keeps
    # its newest and recorded entries within ``ROLLUP_FIT_SHARE`` of the bound, no call; ``auto`` is
    # ``summarizer`` with the built-in summarizer (free) and ``fit`` with a billed one.
    rollup: Rollup = _C["rollup"]

    def rolls_up_by(self, billed_summarizer: bool) -> Literal["summarizer", "fit"]:
        """``summarizer`` or ``fit``: how this policy condenses a summary over its bound
        when the deployment's summarizer is (or is not) a billed model."""
        if self.rollup == "auto":
            return "fit" if billed_summarizer else "summarizer"
        return self.rollup


@dataclass(frozen=True)
class LargeResultSettings:
    """R10.3: results over ``inline_max_tokens`` are shown as a ``preview_chars`` view with
    a read-back reference."""

    inline_max_tokens: int = _L["inline_max_tokens"]
    preview_chars: int = _L["preview_chars"]


# Section defaults built from the defaults file (the one source of every default value).
def _purposes() -> PurposeProfiles:
    return build_purpose_profiles(section_defaults("purpose_profiles"), "purpose_profiles")


def _retention() -> RetentionRules:
    return build_retention(section_defaults("retention_rules"), "retention_rules")


def _skills() -> ActiveSkillPolicy:
    return build_active_skills(section_defaults("active_skill_policy"), "active_skill_policy")


def _child() -> ChildTransferPolicy:
    return build_child_transfer(section_defaults("child_transfer_policy"), "child_transfer_policy")


@dataclass(frozen=True)
class ContextPolicy:
    """The whole policy, frozen with a release (R17): every default made explicit."""

    api_version: str = _P["api_version"]
    purpose_profiles: PurposeProfiles = field(default_factory=_purposes)
    model_limit_ref: str | None = _P["model_limit_ref"]
    retention_rules: RetentionRules = field(default_factory=_retention)
    recent_complete_groups: int = _P["recent_complete_groups"]
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)
    large_result_policy: LargeResultSettings = field(default_factory=LargeResultSettings)
    active_skill_policy: ActiveSkillPolicy = field(default_factory=_skills)
    hook_bindings: tuple[HookBinding, ...] = ()
    child_transfer_policy: ChildTransferPolicy = field(default_factory=_child)

    @property
    def large_result(self) -> LargeResultSettings:
        """The section's earlier name (R10.3)."""
        return self.large_result_policy

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["hook_bindings"] = [dict(b) for b in d["hook_bindings"]]
        return d


def _build_compaction(v: Mapping[str, Any], at: str) -> CompactionPolicy:
    def p(name: str) -> str:
        return rules.join(at, name)

    c = CompactionPolicy(
        context_ratio=rules.ratio(p("context_ratio"), v["context_ratio"], nullable=True),
        user_turns=rules.count(p("user_turns"), v["user_turns"], nullable=True),
        model_steps=rules.count(p("model_steps"), v["model_steps"], nullable=True),
        target_context_ratio=rules.ratio(
            p("target_context_ratio"), v["target_context_ratio"], nullable=False
        )
        or 0.0,
        max_compaction_calls=rules.count(
            p("max_compaction_calls"),
            v["max_compaction_calls"],
            nullable=False,
            cap=PLATFORM_MAX_COMPACTION_CALLS,
        )
        or 0,
        retry_growth_ratio=rules.ratio(
            p("retry_growth_ratio"), v["retry_growth_ratio"], nullable=False
        )
        or 0.0,
        job_timeout_s=rules.positive(p("job_timeout_s"), v["job_timeout_s"]),
        summary_max_ratio=rules.ratio(
            p("summary_max_ratio"), v["summary_max_ratio"], nullable=False
        )
        or 0.0,
        rollup=cast(Rollup, rules.choice(p("rollup"), v["rollup"], ROLLUPS)),
    )
    if c.context_ratio is None and c.user_turns is None and c.model_steps is None:
        raise InvalidPolicy(
            "at least one compaction trigger must be enabled",
            path=at,
            field=rules.leaf(at),
            rule="no_trigger_enabled",
            paths=[p("context_ratio"), p("user_turns"), p("model_steps")],
        )
    if c.context_ratio is not None and c.target_context_ratio >= c.context_ratio:
        raise rules.refuse(
            p("target_context_ratio"),
            "must be below compaction.context_ratio",
            "target_not_below_trigger",
            target=c.target_context_ratio,
            trigger=c.context_ratio,
        )
    return c


def validate_compaction(raw: Mapping[str, Any], at: str = "compaction") -> CompactionPolicy:
    """Every rule of R7.7 over the compaction section alone (defaults filled in)."""
    merged, _ = merge(section_defaults("compaction"), raw, at)
    return _build_compaction(merged, at)


def validate_large_result(
    raw: Mapping[str, Any], at: str = "large_result_policy"
) -> LargeResultSettings:
    merged, _ = merge(section_defaults("large_result_policy"), raw, at)
    return _build_large_result(merged, at)


def _build_large_result(v: Mapping[str, Any], at: str) -> LargeResultSettings:
    return LargeResultSettings(
        inline_max_tokens=rules.count(
            rules.join(at, "inline_max_tokens"), v["inline_max_tokens"], nullable=False
        )
        or 0,
        preview_chars=rules.count(
            rules.join(at, "preview_chars"), v["preview_chars"], nullable=False
        )
        or 0,
    )


def build_policy(v: Mapping[str, Any], known_hooks: Collection[str] | None) -> ContextPolicy:
    """A ContextPolicy from complete (merged) values."""
    api = v["api_version"]
    if api != "v1":
        raise rules.refuse("api_version", "must be v1", "unsupported_version", value=api)
    return ContextPolicy(
        api_version=api,
        purpose_profiles=build_purpose_profiles(v["purpose_profiles"], "purpose_profiles"),
        model_limit_ref=rules.name("model_limit_ref", v["model_limit_ref"], nullable=True),
        retention_rules=build_retention(v["retention_rules"], "retention_rules"),
        recent_complete_groups=rules.count(
            "recent_complete_groups", v["recent_complete_groups"], nullable=False
        )
        or 0,
        compaction=_build_compaction(v["compaction"], "compaction"),
        large_result_policy=_build_large_result(v["large_result_policy"], "large_result_policy"),
        active_skill_policy=build_active_skills(v["active_skill_policy"], "active_skill_policy"),
        hook_bindings=build_hook_bindings(v["hook_bindings"], "hook_bindings", known_hooks),
        child_transfer_policy=build_child_transfer(
            v["child_transfer_policy"], "child_transfer_policy"
        ),
    )


def effective_policy(
    overrides: Mapping[str, Any] | None, known_hooks: Collection[str] | None = None
) -> tuple[ContextPolicy, Provenance]:
    """R17: platform defaults + an agent's overrides, validated; with, for every field
    path, where its value came from ("default" or "override")."""
    merged, provenance = merge_policy(overrides)
    return build_policy(merged, known_hooks), provenance


def validate_policy(
    raw: Mapping[str, Any] | None, known_hooks: Collection[str] | None = None
) -> ContextPolicy:
    """Overrides (or a stored effective policy) to a ContextPolicy. Accepts every earlier
    shape (the four sections of releases published before R17 was complete)."""
    return effective_policy(raw, known_hooks)[0]


__all__ = [
    "PLATFORM_MAX_COMPACTION_CALLS",
    "CompactionPolicy",
    "ContextPolicy",
    "LargeResultSettings",
    "effective_policy",
    "platform_defaults",
    "validate_compaction",
    "validate_large_result",
    "validate_policy",
]
