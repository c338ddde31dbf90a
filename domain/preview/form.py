"""The settings page's draft (R17, R7.7, R6.1): the form has one field per value of the
whole ContextPolicy, generated from the platform defaults; a draft is checked with
``domain.preview.draft.policy_issues`` (every issue at once, each shown beside its field)
and previewed with ``preview_dict`` (the effective policy, where each value came from,
and InputBudget and every threshold in tokens per purpose) — the same functions as
``agentloom policy validate|preview``. Pure: the page's handlers read the release.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from domain.policy.context_policy import ContextPolicy, effective_policy
from domain.policy.defaults import defaults_version, platform_defaults
from domain.preview.draft import policy_issues, preview_dict
from domain.window.budget import ModelProfile
from schemas.errors import InvalidPolicy

OFF = ("off", "null", "none")
GENERAL = "policy"  # the key of an issue no single field is to blame for
HELP = {
    "compaction.context_ratio": "EstimatedInput / InputBudget at which compaction starts",
    "compaction.user_turns": "new questions since the last compaction",
    "compaction.model_steps": "model steps since the last compaction",
    "compaction.target_context_ratio": "what a compaction aims at; below the trigger",
    "hook_bindings": 'a JSON list, e.g. [{"point": "model.chat.before", "hook": "id@1"}]',
    "model_limit_ref": "a platform limit on context capacity, by name",
}


@dataclass(frozen=True)
class Field:
    path: str  # "compaction.context_ratio"
    section: str  # "compaction" ("" for a top-level value)
    label: str
    kind: str  # ratio | count | number | boolean | text | list
    nullable: bool
    help: str = ""


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaf values; a list (hook_bindings) is one leaf."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, Mapping):
            out |= flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


COUNT_NAMES = ("_reserve", "_margin", "_tokens", "_refs", "_skills", "_release", "turns", "steps")


def _kind(path: str, default: Any) -> str:
    if default is None and path.endswith(COUNT_NAMES):
        return "count"
    if isinstance(default, bool):
        return "boolean"
    if isinstance(default, list):
        return "list"
    if path.endswith("_ratio"):
        return "ratio"
    if isinstance(default, float):
        return "number"
    if isinstance(default, int):
        return "count"
    return "text"


def _fields() -> tuple[Field, ...]:
    out = []
    for path, default in flatten(platform_defaults()).items():
        section, _, leaf = path.rpartition(".")
        # A nested section's value is named with its subsection ("Action: output reserve").
        sub = section.partition(".")[2]
        label = f"{sub}: {leaf}" if sub else leaf
        out.append(
            Field(
                path=path,
                section=section,
                label=label.replace("_", " ").capitalize(),
                kind=_kind(path, default),
                nullable=default is None or path in ("compaction.context_ratio",),
                help=HELP.get(path, ""),
            )
        )
    return tuple(out)


FIELDS = _fields()
PATHS = frozenset(f.path for f in FIELDS)


def sections() -> list[tuple[str, list[Field]]]:
    """The fields grouped by section, in the defaults file's order (one fieldset each)."""
    out: dict[str, list[Field]] = {}
    for f in FIELDS:
        out.setdefault(f.section.partition(".")[0] or "general", []).append(f)
    return list(out.items())


def parse_value(text: str) -> Any:
    """A form field's text as a policy value; anything unparsable is kept as typed, so the
    validation names the field."""
    t = text.strip()
    low = t.lower()
    if low in OFF:
        return None
    if low in ("true", "false"):
        return low == "true"
    if t[:1] in "[{":
        try:
            return json.loads(t)
        except ValueError:
            return t
    for kind in (int, float):
        try:
            return kind(t)
        except ValueError:
            pass
    return t


def overrides_from_form(form: Mapping[str, str]) -> dict[str, Any]:
    """Form fields (named by path) → nested overrides; an empty field inherits."""
    out: dict[str, Any] = {}
    for f in FIELDS:
        raw = str(form.get(f.path, "") or "")
        if not raw.strip():
            continue
        node = out
        *parents, leaf = f.path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = parse_value(raw)
    return out


def field_of(issue: Mapping[str, Any]) -> str:
    """The form field an issue belongs beside: its path (a list entry's issue belongs to
    the list's field), else the first field among the paths it names."""
    details = issue.get("details") or {}
    for path in [details.get("path") or "", *(details.get("paths") or ())]:
        name = re.sub(r"\[\d+\].*$", "", str(path))
        if name in PATHS:
            return name
    return GENERAL


def errors_by_field(issues: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for issue in issues:
        key = field_of(issue)
        out[key] = f"{out[key]}; {issue['message']}" if key in out else str(issue["message"])
    return out


@dataclass(frozen=True)
class EffectiveRow:
    path: str
    value: Any
    default: Any
    source: str  # override | platform default

    @property
    def value_text(self) -> str:
        return shown(self.value)

    @property
    def default_text(self) -> str:
        return shown(self.default)


def shown(value: Any) -> str:
    """A value as the page prints it: ``off`` for null, JSON for a list."""
    if value is None:
        return "off"
    if isinstance(value, (list, dict, bool)):
        return json.dumps(value)
    return str(value)


@dataclass(frozen=True)
class Draft:
    """Everything the page shows for one draft."""

    overrides: dict[str, Any]
    issues: list[dict[str, Any]]
    errors: dict[str, str]  # by field path (GENERAL: the whole draft)
    effective: tuple[EffectiveRow, ...] = ()
    budgets: list[dict[str, Any]] = field(default_factory=list)
    profile_error: str = ""
    defaults_version: int = 0
    policy: ContextPolicy | None = None


def evaluate(form: Mapping[str, str], model_profile: Mapping[str, Any] | None) -> Draft:
    """The draft of ``form`` over the platform defaults; with the base release's model
    profile, the budgets per purpose. Hook ids are not known here: Prepare checks them
    at publish (R17)."""
    overrides = overrides_from_form(form)
    issues = policy_issues(overrides)
    draft = Draft(overrides, issues, errors_by_field(issues), defaults_version=defaults_version())
    if issues:
        return draft
    policy, provenance = effective_policy(overrides)
    profiles, profile_error = [], ""
    if model_profile is not None:
        try:
            profiles = [ModelProfile.from_dict(model_profile)]
        except InvalidPolicy as exc:
            profile_error = exc.message
    doc = preview_dict(policy, provenance, profiles)
    defaults = flatten(platform_defaults())
    values = flatten(doc["effective_policy"])
    rows = tuple(
        EffectiveRow(
            path,
            values.get(path),
            defaults.get(path),
            "override" if source == "override" else "platform default",
        )
        for path, source in doc["provenance"].items()
    )
    return Draft(
        overrides,
        issues,
        {},
        rows,
        doc["budgets"] if profiles else [],
        profile_error,
        doc["defaults_version"],
        policy,
    )
