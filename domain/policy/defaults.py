"""Platform defaults of the ContextPolicy (R17) and how an agent's overrides meet them.

The defaults are one versioned literal, ``schemas/policy_defaults.py`` (a constant: no
package file is read). ``merge`` lays an agent's overrides over them and records, for
every field path, whether the effective value came from the platform ("default") or the
agent ("override") — what the settings page and ``agentloom policy preview`` show. Pure.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from domain.policy.rules import join, known_keys, refuse
from schemas.policy_defaults import DEFAULTS_VERSION, POLICY_DEFAULTS

Provenance = dict[str, str]

# Names an earlier policy shape used, still accepted on input (releases published before
# R17 was complete keep validating); the effective policy names only the new one.
SECTION_ALIASES = {"large_result": "large_result_policy"}
TRIGGERS = ("context_ratio", "user_turns", "model_steps")


def defaults_version() -> int:
    return DEFAULTS_VERSION


def platform_defaults() -> dict[str, Any]:
    """A fresh copy of the platform defaults (callers may change it freely)."""
    return copy.deepcopy(POLICY_DEFAULTS)


def section_defaults(section: str) -> dict[str, Any]:
    value: dict[str, Any] = platform_defaults()[section]
    return value


def normalize(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """Accepted spellings folded into the one the effective policy uses: ``large_result``
    is ``large_result_policy``; the seed's ``compaction.triggers`` object is flattened
    into ``compaction``. Giving both spellings of one thing is refused."""
    if not isinstance(raw or {}, Mapping):
        raise refuse("policy", "must be an object", "not_an_object")
    out = dict(raw or {})  # unknown fields are refused by ``merge``, with their paths
    for old, new in SECTION_ALIASES.items():
        if old in out:
            if new in out:
                raise refuse(old, f"and {new} are the same section; give one", "duplicate_field")
            out[new] = out.pop(old)
    comp = out.get("compaction")
    if isinstance(comp, Mapping) and "triggers" in comp:
        comp = dict(comp)
        triggers = known_keys(comp.pop("triggers") or {}, TRIGGERS, "compaction.triggers")
        for k, v in triggers.items():
            if k in comp:
                raise refuse(
                    f"compaction.triggers.{k}",
                    f"is also given as compaction.{k}",
                    "duplicate_field",
                )
            comp[k] = v
        out["compaction"] = comp
    return out


def merge(
    defaults: Mapping[str, Any], overrides: Mapping[str, Any] | None, prefix: str = ""
) -> tuple[dict[str, Any], Provenance]:
    """Overrides laid over defaults, field by field; a section given as null or left out
    is all defaults, a list (hook_bindings) is replaced whole. Unknown fields are refused
    with their path."""
    given = known_keys(overrides or {}, defaults.keys(), prefix)
    out: dict[str, Any] = {}
    prov: Provenance = {}
    for key, default in defaults.items():
        path = join(prefix, key)
        if isinstance(default, Mapping):
            out[key], sub = merge(default, given.get(key), path)
            prov |= sub
        elif key in given:
            out[key], prov[path] = copy.deepcopy(given[key]), "override"
        else:
            out[key], prov[path] = copy.deepcopy(default), "default"
    return out, prov


def merge_policy(raw: Mapping[str, Any] | None) -> tuple[dict[str, Any], Provenance]:
    return merge(POLICY_DEFAULTS, normalize(raw))
