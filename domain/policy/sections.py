"""The sections R17 adds to the ContextPolicy: purpose profiles, retention rules, active
skills, hook bindings and child transfer. Pure.

Each ``build_*`` takes a section's *merged* values (defaults with the agent's overrides,
see domain/policy/defaults.py) and its path, and returns a frozen dataclass or raises
``InvalidPolicy`` naming the field path and rule.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from domain.policy.rules import choice, count, flag, join, known_keys, name, refuse, tokens
from schemas.limits import MAX_INT32

PURPOSES = ("action", "completion", "compaction", "child")
RETENTION_CLASSES = ("required", "active", "compressible", "on_demand", "optional")
# Built-in rules no agent configuration may disable (seed §11): the current task is
# required (R10.1) and a compaction call gets no tools (R11.3).
LOCKED_RETENTION = {"task": "required"}
LOCKED_TOOLS = {"compaction": False}
HOOK_POINTS = (
    "context.prepare.before",
    "context.prepare.after",
    "model.chat.before",
    "model.chat.after",
    "context.compact.before",
    "context.compact.after",
)
COMPACT_POINTS = ("context.compact.before", "context.compact.after")  # the compaction service's
MAX_ACTIVE_SKILLS = 64
MAX_BACKGROUND_REFS = 1000
MAX_HOOK_BINDINGS = 32


@dataclass(frozen=True)
class PurposeProfile:
    """How one call purpose uses a model: ``None`` means "as the release's model profile"
    (its name, output reserve, safety margin). Defaults: schemas/policy_defaults.py."""

    model_profile_ref: str | None
    output_reserve: int | None
    safety_margin: int | None
    tools_allowed: bool


@dataclass(frozen=True)
class PurposeProfiles:
    action: PurposeProfile
    completion: PurposeProfile
    compaction: PurposeProfile
    child: PurposeProfile

    def get(self, purpose: str) -> PurposeProfile:
        profile: PurposeProfile = getattr(self, purpose)
        return profile


@dataclass(frozen=True)
class RetentionRules:
    """R10.1 / seed §5.4: the retention class of each block category."""

    task: str
    state: str
    summary: str
    history: str
    interactions: str
    tool_results: str
    material: str


@dataclass(frozen=True)
class ActiveSkillPolicy:
    """R12.2/R12.3: how many skills may be active at once, an optional cap on one skill's
    instruction tokens (an oversized skill is a budget conflict, never cut), and after how
    many runs without use an active skill is released (``None``: kept until the thread
    ends)."""

    max_active_skills: int
    max_instruction_tokens: int | None
    idle_runs_before_release: int | None


class HookBinding(BaseModel):
    """R14: a hook bound to one point for this release. Its id is ``hook@version``.

    A frozen pydantic model: the release body's open binding
    (``services.prepare.release_spec.ReleaseHook``) derives from it."""

    model_config = ConfigDict(frozen=True)

    point: str
    hook: str
    version: str | None = None

    @property
    def hook_id(self) -> str:
        return f"{self.hook}@{self.version}" if self.version else self.hook


@dataclass(frozen=True)
class ChildTransferPolicy:
    """R13.2: what a parent may hand a child as background (never a grant) and how much
    of a child's result may enter the parent's context."""

    max_background_refs: int
    max_background_tokens: int | None
    max_result_tokens: int | None
    # the user constraints in force in the parent's session render in the
    # child's action contexts too (a constraint is the user's, whoever works for them).
    inherit_constraints: bool = True


def build_purpose_profiles(v: Mapping[str, Any], path: str) -> PurposeProfiles:
    return PurposeProfiles(**{p: _purpose(p, v[p], join(path, p)) for p in PURPOSES})


def _purpose(purpose: str, v: Mapping[str, Any], path: str) -> PurposeProfile:
    tools = flag(join(path, "tools_allowed"), v["tools_allowed"])
    if purpose in LOCKED_TOOLS and tools != LOCKED_TOOLS[purpose]:
        raise refuse(
            join(path, "tools_allowed"),
            f"is fixed to {str(LOCKED_TOOLS[purpose]).lower()} by the platform",
            "builtin_locked",
            value=tools,
        )
    return PurposeProfile(
        model_profile_ref=name(join(path, "model_profile_ref"), v["model_profile_ref"], True),
        output_reserve=tokens(join(path, "output_reserve"), v["output_reserve"], True, MAX_INT32),
        safety_margin=tokens(join(path, "safety_margin"), v["safety_margin"], True, MAX_INT32),
        tools_allowed=tools,
    )


def build_retention(v: Mapping[str, Any], path: str) -> RetentionRules:
    out = {k: choice(join(path, k), c, RETENTION_CLASSES) for k, c in v.items()}
    for category, fixed in LOCKED_RETENTION.items():
        if out[category] != fixed:
            raise refuse(
                join(path, category),
                f"is fixed to {fixed} by the platform",
                "builtin_locked",
                value=out[category],
            )
    return RetentionRules(**out)


def build_active_skills(v: Mapping[str, Any], path: str) -> ActiveSkillPolicy:
    return ActiveSkillPolicy(
        max_active_skills=count(
            join(path, "max_active_skills"), v["max_active_skills"], False, MAX_ACTIVE_SKILLS
        )
        or 0,
        max_instruction_tokens=count(
            join(path, "max_instruction_tokens"), v["max_instruction_tokens"], True, MAX_INT32
        ),
        idle_runs_before_release=count(
            join(path, "idle_runs_before_release"), v["idle_runs_before_release"], True, MAX_INT32
        ),
    )


def build_child_transfer(v: Mapping[str, Any], path: str) -> ChildTransferPolicy:
    return ChildTransferPolicy(
        max_background_refs=count(
            join(path, "max_background_refs"), v["max_background_refs"], False, MAX_BACKGROUND_REFS
        )
        or 0,
        max_background_tokens=count(
            join(path, "max_background_tokens"), v["max_background_tokens"], True, MAX_INT32
        ),
        max_result_tokens=count(
            join(path, "max_result_tokens"), v["max_result_tokens"], True, MAX_INT32
        ),
        inherit_constraints=flag(
            join(path, "inherit_constraints"), v.get("inherit_constraints", True)
        ),
    )


def build_hook_bindings(
    v: Any, path: str, known_hooks: Collection[str] | None
) -> tuple[HookBinding, ...]:
    """``known_hooks``: the hook ids (``name@version``) this deployment has loaded. At
    publish it is given and an unknown id is refused; reading a frozen release back passes
    ``None`` (it was checked when it was published)."""
    if not isinstance(v, list | tuple):
        raise refuse(path, "must be a list of bindings", "not_a_list")
    if len(v) > MAX_HOOK_BINDINGS:
        raise refuse(path, f"must hold at most {MAX_HOOK_BINDINGS} bindings", "platform_cap")
    out: list[HookBinding] = []
    for i, raw in enumerate(v):
        at = f"{path}[{i}]"
        b = known_keys(raw, ("point", "hook", "version"), at)
        binding = HookBinding(
            point=choice(join(at, "point"), b.get("point"), HOOK_POINTS),
            hook=name(join(at, "hook"), b.get("hook"), False) or "",
            version=name(join(at, "version"), b.get("version"), True),
        )
        if known_hooks is not None and not _known(binding, known_hooks):
            raise refuse(
                join(at, "hook"),
                f"names {binding.hook_id}, which this deployment does not provide at"
                f" {binding.point}",
                "unknown_hook",
                hook=binding.hook_id,
                known=sorted(known_hooks),
            )
        if any((o.point, o.hook_id) == (binding.point, binding.hook_id) for o in out):
            raise refuse(at, f"binds {binding.hook_id} to {binding.point} twice", "duplicate")
        out.append(binding)
    return tuple(out)


def at_point(point: str, hook_id: str) -> str:
    """A known hook as served at one point (``point=name@version``): a deployment that
    says where each loaded hook answers has a binding at any other point refused at
    publish, where a prepare or a compaction job would only fail later."""
    return f"{point}={hook_id}"


def _known(b: HookBinding, known: Collection[str]) -> bool:
    """An unversioned binding matches any loaded version of its hook; ids qualified by
    point (``at_point``) match only a binding at that point."""
    if any("=" in k for k in known):
        prefix = f"{b.point}="
        known = [k[len(prefix) :] for k in known if k.startswith(prefix)]
    if b.version is not None:
        return b.hook_id in known
    return b.hook in known or any(k.partition("@")[0] == b.hook for k in known)
