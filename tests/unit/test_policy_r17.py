"""R17: the whole ContextPolicy — platform defaults from one file, an agent's overrides,
the effective policy with provenance, every validation rule with its field path, and the
preview's exact token thresholds."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.context.rendering import RETENTION
from domain.policy.context_policy import (
    ContextPolicy,
    effective_policy,
    platform_defaults,
    validate_policy,
)
from domain.preview.draft import policy_issues, preview, preview_dict
from domain.window.budget import ModelProfile
from schemas.errors import InvalidPolicy
from schemas.policy_defaults import DEFAULTS_VERSION, POLICY_DEFAULTS

PROFILE = ModelProfile("m-128k", 128_000, 4_000, 1_000)
SMALL = ModelProfile("m-8k", 8_192, 1_024, 256)


def _refusal(raw: Any, known_hooks: Any = None) -> dict[str, Any]:
    with pytest.raises(InvalidPolicy) as err:
        validate_policy(raw, known_hooks)
    assert err.value.code == "invalid_policy"
    return err.value.details


def _set(path: str, value: Any) -> dict[str, Any]:
    """``a.b.c`` = value as a nested override."""
    out: dict[str, Any] = {}
    node = out
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return out


@pytest.mark.spec("R17")
def test_platform_defaults_come_from_one_versioned_file() -> None:
    data = {"defaults_version": DEFAULTS_VERSION, "policy": POLICY_DEFAULTS}
    assert isinstance(data["defaults_version"], int)
    assert data["policy"] == platform_defaults()
    # The dataclass defaults and the validated empty override are that file.
    assert ContextPolicy().to_dict() == data["policy"]
    assert validate_policy({}).to_dict() == data["policy"]
    assert validate_policy(None).to_dict() == data["policy"]


@pytest.mark.spec("R17", "R10.1")
def test_default_retention_rules_are_what_the_assembler_applies() -> None:
    rules = platform_defaults()["retention_rules"]
    assert {k: v for k, v in rules.items() if k in RETENTION} == RETENTION


@pytest.mark.spec("R17")
def test_provenance_marks_every_field_default_or_override() -> None:
    policy, prov = effective_policy(
        {"compaction": {"user_turns": 5}, "purpose_profiles": {"action": {"output_reserve": 0}}}
    )
    assert policy.compaction.user_turns == 5
    assert policy.purpose_profiles.action.output_reserve == 0
    overridden = {p for p, src in prov.items() if src == "override"}
    assert overridden == {"compaction.user_turns", "purpose_profiles.action.output_reserve"}
    assert set(prov.values()) == {"default", "override"}
    # Every leaf of the effective policy has an entry, and nothing else does.
    assert set(prov) == set(_leaves(policy.to_dict()))


def _leaves(d: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        path = f"{prefix}.{k}" if prefix else k
        out += _leaves(v, path) if isinstance(v, dict) else [path]
    return out


OVERRIDABLE = {
    "compaction.user_turns": st.one_of(st.none(), st.integers(1, 100)),
    "compaction.model_steps": st.one_of(st.none(), st.integers(1, 100)),
    "compaction.max_compaction_calls": st.integers(1, 16),
    "compaction.summary_max_ratio": st.floats(0.01, 0.99),
    "recent_complete_groups": st.integers(1, 50),
    "large_result_policy.inline_max_tokens": st.integers(1, 100_000),
    "active_skill_policy.max_active_skills": st.integers(1, 64),
    "child_transfer_policy.max_background_refs": st.integers(1, 1000),
    "purpose_profiles.child.safety_margin": st.one_of(st.none(), st.integers(0, 5000)),
    "purpose_profiles.completion.tools_allowed": st.booleans(),
    "retention_rules.material": st.sampled_from(["optional", "on_demand", "compressible"]),
}


@pytest.mark.spec("R17")
@given(st.dictionaries(st.sampled_from(sorted(OVERRIDABLE)), st.none(), max_size=6), st.data())
def test_defaults_plus_overrides_give_the_effective_policy(
    chosen: dict[str, None], data: st.DataObject
) -> None:
    values = {p: data.draw(OVERRIDABLE[p]) for p in chosen}
    overrides: dict[str, Any] = {}
    for path, value in values.items():
        section, _, rest = path.partition(".")
        nested = _set(path, value)
        if rest:
            overrides.setdefault(section, {})
            _merge(overrides[section], nested[section])
        else:
            overrides |= nested
    policy, prov = effective_policy(overrides)
    flat = _flat(policy.to_dict())
    defaults = _flat(platform_defaults())
    for path in flat:
        if path in values:
            assert (flat[path], prov[path]) == (values[path], "override")
        else:
            assert (flat[path], prov[path]) == (defaults[path], "default")
    # Frozen and read back (a release's stored policy) it is the same policy.
    assert validate_policy(policy.to_dict()) == policy


def _merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    for k, v in more.items():
        if isinstance(v, dict):
            _merge(into.setdefault(k, {}), v)
        else:
            into[k] = v


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        path = f"{prefix}.{k}" if prefix else k
        out |= _flat(v, path) if isinstance(v, dict) else {path: v}
    return out


@pytest.mark.spec("R17", "R7.7")
def test_a_release_of_the_earlier_four_section_shape_stays_readable() -> None:
    stored = {
        "api_version": "v1",
        "recent_complete_groups": 1,
        "compaction": {"context_ratio": 0.8, "user_turns": 2, "target_context_ratio": 0.6},
        "large_result": {"inline_max_tokens": 500, "preview_chars": 300},
    }
    policy = validate_policy(stored)
    assert policy.large_result == policy.large_result_policy
    assert policy.large_result_policy.inline_max_tokens == 500
    assert policy.recent_complete_groups == 1
    assert policy.purpose_profiles == ContextPolicy().purpose_profiles
    assert "large_result" not in policy.to_dict()


@pytest.mark.spec("R17", "R7.7")
def test_the_seeds_triggers_object_is_the_same_as_flat_triggers() -> None:
    nested = validate_policy({"compaction": {"triggers": {"user_turns": 20, "model_steps": 40}}})
    flat = validate_policy({"compaction": {"user_turns": 20, "model_steps": 40}})
    assert nested == flat


HOOK = {"point": "context.prepare.after", "hook": "audit", "version": "1"}


@pytest.mark.spec("R17", "R7.7")
@pytest.mark.parametrize(
    ("raw", "path", "rule"),
    [
        ("not a policy", "policy", "not_an_object"),
        ({"hooks": []}, "hooks", "unknown_field"),
        ({"api_version": "v2"}, "api_version", "unsupported_version"),
        ({"large_result": {}, "large_result_policy": {}}, "large_result", "duplicate_field"),
        # purpose profiles
        ({"purpose_profiles": 3}, "purpose_profiles", "not_an_object"),
        ({"purpose_profiles": {"batch": {}}}, "purpose_profiles.batch", "unknown_field"),
        (
            _set("purpose_profiles.action.output_reserve", -1),
            "purpose_profiles.action.output_reserve",
            "non_negative_integer",
        ),
        (
            _set("purpose_profiles.child.safety_margin", "10"),
            "purpose_profiles.child.safety_margin",
            "non_negative_integer",
        ),
        (
            _set("purpose_profiles.action.output_reserve", 2**31),
            "purpose_profiles.action.output_reserve",
            "platform_cap",
        ),
        (
            _set("purpose_profiles.action.tools_allowed", "yes"),
            "purpose_profiles.action.tools_allowed",
            "boolean",
        ),
        (
            _set("purpose_profiles.compaction.tools_allowed", True),
            "purpose_profiles.compaction.tools_allowed",
            "builtin_locked",
        ),
        (
            _set("purpose_profiles.action.model_profile_ref", ""),
            "purpose_profiles.action.model_profile_ref",
            "name",
        ),
        ({"model_limit_ref": 5}, "model_limit_ref", "name"),
        # retention rules
        (_set("retention_rules.history", "forever"), "retention_rules.history", "not_an_option"),
        (_set("retention_rules.task", "optional"), "retention_rules.task", "builtin_locked"),
        (_set("retention_rules.images", "optional"), "retention_rules.images", "unknown_field"),
        ({"recent_complete_groups": 0}, "recent_complete_groups", "positive_integer"),
        # compaction (R7.7, with paths)
        (_set("compaction.summary_max_ratio", 1), "compaction.summary_max_ratio", "ratio_range"),
        (_set("compaction.context_ratio", None), "compaction", "no_trigger_enabled"),
        (
            _set("compaction.target_context_ratio", 0.85),
            "compaction.target_context_ratio",
            "target_not_below_trigger",
        ),
        (
            {"compaction": {"triggers": {"user_turns": 2}, "user_turns": 3}},
            "compaction.triggers.user_turns",
            "duplicate_field",
        ),
        (
            _set("compaction.triggers.turns", 2),
            "compaction.triggers.turns",
            "unknown_field",
        ),
        # large results, active skills, child transfer
        (
            _set("large_result_policy.inline_max_tokens", 0),
            "large_result_policy.inline_max_tokens",
            "positive_integer",
        ),
        (
            _set("large_result.preview_chars", -1),
            "large_result_policy.preview_chars",
            "positive_integer",
        ),
        (
            _set("active_skill_policy.max_active_skills", 65),
            "active_skill_policy.max_active_skills",
            "platform_cap",
        ),
        (
            _set("active_skill_policy.max_instruction_tokens", -5),
            "active_skill_policy.max_instruction_tokens",
            "positive_integer",
        ),
        (
            _set("active_skill_policy.idle_runs_before_release", 1.5),
            "active_skill_policy.idle_runs_before_release",
            "positive_integer",
        ),
        (
            _set("child_transfer_policy.max_background_refs", 1001),
            "child_transfer_policy.max_background_refs",
            "platform_cap",
        ),
        (
            _set("child_transfer_policy.max_result_tokens", 0),
            "child_transfer_policy.max_result_tokens",
            "positive_integer",
        ),
        # hook bindings
        ({"hook_bindings": {}}, "hook_bindings", "not_a_list"),
        ({"hook_bindings": [HOOK] * 33}, "hook_bindings", "platform_cap"),
        ({"hook_bindings": ["audit"]}, "hook_bindings[0]", "not_an_object"),
        (
            {"hook_bindings": [HOOK | {"point": "model.chat.sideways"}]},
            "hook_bindings[0].point",
            "not_an_option",
        ),
        ({"hook_bindings": [HOOK | {"hook": ""}]}, "hook_bindings[0].hook", "name"),
        ({"hook_bindings": [HOOK | {"when": 1}]}, "hook_bindings[0].when", "unknown_field"),
        ({"hook_bindings": [HOOK, HOOK]}, "hook_bindings[1]", "duplicate"),
    ],
)
def test_each_rule_refuses_with_the_field_path_and_a_rule_code(
    raw: Any, path: str, rule: str
) -> None:
    details = _refusal(raw)
    assert (details["path"], details["rule"]) == (path, rule)
    assert details["field"] == path.rpartition(".")[2]


@pytest.mark.spec("R17")
def test_every_leaf_given_a_wrong_type_is_refused_at_its_own_path() -> None:
    for path in _leaves(platform_defaults()):
        if path == "hook_bindings":
            continue  # a list is its right type; covered above
        assert _refusal(_set(path, [1]))["path"] == path, path


@pytest.mark.spec("R17", "R14")
def test_unknown_hook_ids_are_refused_when_the_known_hooks_are_given() -> None:
    known = {"audit@1", "redact@3"}
    assert validate_policy({"hook_bindings": [HOOK]}, known).hook_bindings[0].hook_id == "audit@1"
    unversioned = HOOK | {"hook": "redact", "version": None}
    assert (
        validate_policy({"hook_bindings": [unversioned]}, known).hook_bindings[0].hook == "redact"
    )
    details = _refusal({"hook_bindings": [HOOK, HOOK | {"version": "2"}]}, known)
    assert (details["path"], details["rule"], details["hook"]) == (
        "hook_bindings[1].hook",
        "unknown_hook",
        "audit@2",
    )
    assert _refusal({"hook_bindings": [HOOK]}, set())["rule"] == "unknown_hook"
    # A frozen release read back is not checked against this process's hooks.
    assert validate_policy({"hook_bindings": [HOOK | {"version": "2"}]}, None).hook_bindings


@pytest.mark.spec("R17")
def test_a_draft_reports_every_issue_at_once() -> None:
    issues = policy_issues(
        {
            "bogus": 1,
            "compaction": {"context_ratio": 2, "user_turns": 0},
            "large_result": {"preview_chars": -1},
            "hook_bindings": [HOOK | {"point": "nowhere"}],
        },
        known_hooks={"audit@1"},
    )
    assert [(i["details"]["path"], i["details"]["rule"]) for i in issues] == [
        ("bogus", "unknown_field"),
        ("compaction.context_ratio", "ratio_range"),
        ("compaction.user_turns", "positive_integer"),
        ("large_result_policy.preview_chars", "positive_integer"),
        ("hook_bindings[0].point", "not_an_option"),
    ]
    assert all(i["code"] == "invalid_policy" for i in issues)
    assert policy_issues({"compaction": {"user_turns": 3}}) == []
    assert policy_issues("nope")[0]["details"]["rule"] == "not_an_object"


@pytest.mark.spec("R17", "R6.1", "R7.1", "R7.5")
def test_preview_gives_exact_thresholds_per_purpose_and_profile() -> None:
    policy = validate_policy(
        {
            "compaction": {"user_turns": 20},
            "purpose_profiles": {"compaction": {"output_reserve": 2_000, "safety_margin": 0}},
        }
    )
    rows = {(r.purpose, r.model_profile): r for r in preview(policy, [PROFILE, SMALL])}
    assert len(rows) == 8
    action = rows[("action", "m-128k")]
    assert action.input_budget == 123_000  # 128000 - 4000 - 1000
    assert (action.context_trigger_tokens, action.target_tokens) == (98_400, 73_800)
    assert (action.retry_growth_tokens, action.summary_max_tokens) == (6_150, 18_450)
    assert (action.user_turns, action.model_steps, action.inline_max_tokens) == (20, None, 4000)
    comp = rows[("compaction", "m-8k")]
    assert (comp.output_reserve, comp.safety_margin, comp.input_budget) == (2_000, 0, 6_192)
    assert comp.tools_allowed is False
    assert comp.context_trigger_tokens == math.ceil(6_192 * Fraction(8, 10))


@pytest.mark.spec("R17", "R6.1")
def test_preview_follows_profile_and_limit_references_and_reports_what_cannot_fit() -> None:
    policy = validate_policy(
        {
            "model_limit_ref": "platform-32k",
            "purpose_profiles": {
                "action": {"model_profile_ref": "m-128k"},
                "completion": {"model_profile_ref": "missing"},
                "child": {"model_profile_ref": "m-8k", "output_reserve": 9_000},
            },
        }
    )
    rows = preview(policy, [PROFILE, SMALL], {"platform-32k": 32_000})
    by = {r.purpose: r for r in rows if r.purpose != "compaction"}
    assert by["action"].input_budget == 32_000 - 4_000 - 1_000
    assert by["completion"].error is not None
    assert by["completion"].error["details"]["rule"] == "unknown_model_profile"
    assert by["child"].input_budget is None and by["child"].error is not None
    assert len([r for r in rows if r.purpose == "compaction"]) == 2
    doc = preview_dict(*effective_policy({}), [SMALL])
    assert doc["provenance"]["compaction.context_ratio"] == "default"
    assert json.loads(json.dumps(doc)) == doc


@pytest.mark.spec("R17", "R7.1", "R7.5")
@given(
    # at least 1 token of input budget (1,000 - 500 - 500 leaves none: a refused profile)
    budget_parts=st.tuples(st.integers(1_001, 2_000_000), st.integers(0, 500), st.integers(0, 500)),
    ratio=st.integers(2, 99),
    target=st.integers(1, 98),
)
def test_preview_thresholds_are_the_smallest_token_counts_reaching_each_ratio(
    budget_parts: tuple[int, int, int], ratio: int, target: int
) -> None:
    cap, reserve, margin = budget_parts
    if target >= ratio:
        target = ratio - 1
    policy = validate_policy(
        {"compaction": {"context_ratio": ratio / 100, "target_context_ratio": target / 100}}
    )
    row = preview(policy, [ModelProfile("m", cap, reserve, margin)])[0]
    budget = cap - reserve - margin
    assert row.input_budget == budget
    for tokens, share in ((row.context_trigger_tokens, ratio), (row.target_tokens, target)):
        assert tokens is not None
        assert Fraction(tokens, budget) >= Fraction(share, 100)
        assert Fraction(tokens - 1, budget) < Fraction(share, 100)


@pytest.mark.spec("R17", "R6.1")
def test_preview_of_a_profile_with_no_input_budget_says_why_instead_of_thresholds() -> None:
    policy = validate_policy({"compaction": {"context_ratio": 0.8}})
    row = preview(policy, [ModelProfile("m", 1_000, 500, 500)])[0]  # the action purpose
    assert row.input_budget is None and row.context_trigger_tokens is None
    assert row.error is not None and row.error["code"] == "invalid_policy"
    assert row.error["details"] == {"capacity": 1000, "output_reserve": 500, "safety_margin": 500}
