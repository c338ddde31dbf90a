"""The model profile a call of each purpose is budgeted on (R6, R17). Pure.

A release binds one model profile. Its policy may name, per purpose, another profile of
the deployment's catalog (``purpose_profiles.<p>.model_profile_ref``: compaction on a
cheaper model, say), override that purpose's output reserve and safety margin, and name a
platform limit on context capacity (``model_limit_ref``). Prepare and the policy preview
both derive a purpose's profile with ``for_purpose``; publish refuses a reference the
catalog does not hold (``check_refs``), so a prepare never meets an unknown name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from domain.policy.context_policy import ContextPolicy
from domain.policy.sections import PURPOSES
from domain.pricing import ModelPrices
from domain.window.budget import ModelProfile
from schemas.errors import InvalidPolicy


@dataclass(frozen=True)
class ModelCatalog:
    """The deployment's named model profiles and named platform limits (in tokens)."""

    profiles: Mapping[str, ModelProfile] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)


def check_refs(policy: ContextPolicy, own_profile: str, catalog: ModelCatalog) -> None:
    """Publish: every ``model_profile_ref`` names the release's own profile or one of the
    catalog's, and ``model_limit_ref`` one of its limits."""
    for purpose in PURPOSES:
        ref = policy.purpose_profiles.get(purpose).model_profile_ref
        if ref is not None and ref != own_profile and ref not in catalog.profiles:
            path = f"purpose_profiles.{purpose}.model_profile_ref"
            raise InvalidPolicy(
                f"{path} names {ref}, which is neither the release's model profile"
                f" ({own_profile}) nor one this deployment defines"
                f" ({', '.join(sorted(catalog.profiles)) or 'none'})",
                field="model_profile_ref",
                path=path,
                rule="unknown_model_profile",
                value=ref,
                options=sorted({own_profile, *catalog.profiles}),
            )
    ref = policy.model_limit_ref
    if ref is not None and ref not in catalog.limits:
        raise InvalidPolicy(
            f"model_limit_ref names {ref}, a platform limit this deployment does not define"
            f" ({', '.join(sorted(catalog.limits)) or 'none'})",
            field="model_limit_ref",
            path="model_limit_ref",
            rule="unknown_model_limit",
            value=ref,
            options=sorted(catalog.limits),
        )


def for_purpose(
    policy: ContextPolicy,
    purpose: str,
    default: ModelProfile,
    profiles: Mapping[str, ModelProfile] | None = None,
    limits: Mapping[str, int] | None = None,
) -> ModelProfile:
    """``default`` (the release's profile, or a request's override) or the profile the
    purpose references, with the purpose's output reserve and safety margin where it sets
    them, and its platform limit lowered to ``model_limit_ref``'s. A reference missing
    from ``profiles``/``limits`` leaves ``default``/the limit as they are (publish refuses
    it; the preview reports it)."""
    pp = policy.purpose_profiles.get(purpose)
    base = default
    if pp.model_profile_ref is not None and profiles is not None:
        base = profiles.get(pp.model_profile_ref, default)
    limit = base.platform_limit
    if policy.model_limit_ref is not None and limits is not None:
        ref = limits.get(policy.model_limit_ref)
        if ref is not None:
            limit = ref if limit is None else min(limit, ref)
    return replace(
        base,
        output_reserve=base.output_reserve if pp.output_reserve is None else pp.output_reserve,
        safety_margin=base.safety_margin if pp.safety_margin is None else pp.safety_margin,
        platform_limit=limit,
    )


def purpose_prices(
    policy: ContextPolicy,
    purpose: str,
    release_profile: Mapping[str, Any] | None,
    profiles: Mapping[str, ModelProfile] | None = None,
) -> ModelPrices | None:
    """The prices a call of ``purpose`` is charged at: those of the profile it is
    budgeted on (``for_purpose``: the release's, or the one it references). None:
    unpriced (no profile, or one without prices)."""
    if release_profile is None:
        return None
    default = ModelProfile.from_dict(release_profile)
    return for_purpose(policy, purpose, default, profiles).prices
