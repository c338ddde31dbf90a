"""A policy draft (R17): every validation issue at once, and the preview — InputBudget and
every trigger threshold as exact integer tokens per purpose and model profile. Pure.

The settings page validates a draft on every change and shows each issue beside its
field; ``agentloom policy validate|preview`` print the same.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from typing import Any

from domain.compaction.gain import project
from domain.compaction.triggers import ratio_threshold
from domain.policy.context_policy import ContextPolicy, effective_policy
from domain.policy.defaults import defaults_version, normalize
from domain.policy.sections import PURPOSES
from domain.preview.cache_projection import project_cache
from domain.window.budget import ModelProfile
from domain.window.model_catalog import for_purpose
from schemas.errors import InvalidPolicy

MAX_ISSUES = 50


def policy_issues(
    overrides: Mapping[str, Any] | None, known_hooks: Collection[str] | None = None
) -> list[dict[str, Any]]:
    """Every issue of a draft, each as ``InvalidPolicy.to_dict()`` (``details.path``,
    ``details.rule``). Found one at a time: the offending override is set back to its
    default and the draft validated again, so one bad field does not hide the next. A bad
    hook binding sets the whole ``hook_bindings`` list back."""
    issues: list[dict[str, Any]] = []
    try:
        draft = normalize(overrides)
    except InvalidPolicy as exc:
        return [exc.to_dict()]
    while len(issues) < MAX_ISSUES:
        try:
            effective_policy(draft, known_hooks)
            return issues
        except InvalidPolicy as exc:
            issues.append(exc.to_dict())
            paths = exc.details.get("paths") or [exc.details.get("path") or ""]
            if not any([_drop(draft, p) for p in paths]):
                return issues  # nothing of the draft to blame: no further issue is knowable
    return issues


def _drop(draft: dict[str, Any], path: str) -> bool:
    """Remove ``path`` (dotted; a list index drops the whole list) from the draft."""
    keys = re.sub(r"\[\d+\].*$", "", path).split(".")
    node: Any = draft
    for k in keys[:-1]:
        node = node.get(k) if isinstance(node, dict) else None
    if isinstance(node, dict) and keys[-1] in node:
        del node[keys[-1]]
        return True
    return False


@dataclass(frozen=True)
class PurposePreview:
    """One purpose on one model profile: the budget arithmetic of R6.1 and where each
    trigger fires, in tokens (``None``: the trigger is off, or ``error`` says why the
    profile cannot be used)."""

    purpose: str
    model_profile: str
    tools_allowed: bool
    context_capacity: int
    platform_limit: int | None
    output_reserve: int
    safety_margin: int
    input_budget: int | None
    context_trigger_tokens: int | None = None  # R7.1: EstimatedInput >= this triggers
    target_tokens: int | None = None  # R7.5: compaction aims at or below this
    retry_growth_tokens: int | None = None  # R7.6: new compressible content to retry
    summary_max_tokens: int | None = None  # R11.8: the effective summary's bound
    inline_max_tokens: int | None = None  # R10.3: larger results are externalized
    user_turns: int | None = None  # R7.2: turn triggers, not tokens
    model_steps: int | None = None  # R7.3
    # ``cache_expired``: a session idle at least the profile's cache lifetime (seconds)
    # whose view is at or above these tokens (the target) compacts at its next prepare;
    # None with the ratio trigger off (domain.compaction.triggers).
    cache_expired_tokens: int | None = None
    cache_ttl_s: int | None = None
    # A steady session projected under the draft (``domain.compaction.gain.project``,
    # replayed under the cache rules of the profile's provider format by
    # ``domain.preview.cache_projection``): the share of request tokens read from the
    # provider's cache (and the ideal share, were each call to read all of the previous
    # request), the cost per model call with compaction and the real rules' writes (in
    # ``cost_unit``: the profile's currency, or input-token equivalents when it has no
    # prices) and the model calls between compactions.
    projected_cache_share: float | None = None
    projected_ideal_cache_share: float | None = None
    projected_cost_per_call: float | None = None
    cost_unit: str | None = None
    calls_per_compaction: int | None = None
    error: dict[str, Any] | None = None


def preview(
    policy: ContextPolicy,
    model_profiles: Iterable[ModelProfile],
    model_limits: Mapping[str, int] | None = None,
) -> list[PurposePreview]:
    """Each purpose on its referenced model profile (``model_profile_ref``), or on every
    given profile when it names none. ``model_limits`` resolves ``model_limit_ref`` to a
    platform limit on context capacity; without it the reference is not applied."""
    profiles = {p.name: p for p in model_profiles}
    out: list[PurposePreview] = []
    for purpose in PURPOSES:
        pp = policy.purpose_profiles.get(purpose)
        names = [pp.model_profile_ref] if pp.model_profile_ref else list(profiles)
        for name in names:
            base = profiles.get(name)
            if base is None:
                err = InvalidPolicy(
                    f"purpose_profiles.{purpose}.model_profile_ref names {name}, not given",
                    path=f"purpose_profiles.{purpose}.model_profile_ref",
                    rule="unknown_model_profile",
                )
                row = PurposePreview(purpose, name, pp.tools_allowed, 0, None, 0, 0, None)
                out.append(replace(row, error=err.to_dict()))
                continue
            out.append(
                _one(policy, purpose, for_purpose(policy, purpose, base, limits=model_limits))
            )
    return out


def _one(policy: ContextPolicy, purpose: str, p: ModelProfile) -> PurposePreview:
    c = policy.compaction
    row = PurposePreview(
        purpose=purpose,
        model_profile=p.name,
        tools_allowed=policy.purpose_profiles.get(purpose).tools_allowed,
        context_capacity=p.context_capacity,
        platform_limit=p.platform_limit,
        output_reserve=p.output_reserve,
        safety_margin=p.safety_margin,
        input_budget=None,
    )
    try:
        budget = p.input_budget()
    except InvalidPolicy as exc:
        return replace(row, error=exc.to_dict())
    projected = project(policy, p, p.prices)
    cache = project_cache(policy, p, projected.calls_per_compaction)
    return replace(
        row,
        input_budget=budget,
        projected_cache_share=round(cache.share, 4),
        projected_ideal_cache_share=round(cache.ideal_share, 4),
        projected_cost_per_call=round(projected.cost_per_call + cache.extra_cost_per_call, 6),
        cost_unit=p.prices.currency if p.prices else "input_tokens",
        calls_per_compaction=projected.calls_per_compaction,
        context_trigger_tokens=(
            None if c.context_ratio is None else ratio_threshold(c.context_ratio, budget)
        ),
        # The same exact arithmetic as the compaction trigger and target checks.
        target_tokens=ratio_threshold(c.target_context_ratio, budget),
        retry_growth_tokens=ratio_threshold(c.retry_growth_ratio, budget),
        summary_max_tokens=math.floor(Fraction(str(c.summary_max_ratio)) * budget),
        inline_max_tokens=policy.large_result_policy.inline_max_tokens,
        user_turns=c.user_turns,
        model_steps=c.model_steps,
        cache_expired_tokens=(
            None if c.context_ratio is None else ratio_threshold(c.target_context_ratio, budget)
        ),
        cache_ttl_s=None if c.context_ratio is None else p.cache_rules.ttl_s,
    )


def preview_dict(
    policy: ContextPolicy,
    provenance: Mapping[str, str],
    model_profiles: Iterable[ModelProfile],
    model_limits: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The whole preview as JSON-ready data: the effective policy, where each value came
    from, and the per-purpose budget rows."""
    return {
        "defaults_version": defaults_version(),
        "effective_policy": policy.to_dict(),
        "provenance": dict(sorted(provenance.items())),
        "budgets": [asdict(r) for r in preview(policy, model_profiles, model_limits)],
    }
