"""Issue 28 (3), issue 40 (6): every leaf field of the ContextPolicy has a proven effect
through the product's own path (R17). The rows are derived from the policy's own field
list: a new field without a row fails.

A *direct* row publishes a release with the field at its default and one with it changed,
and shows that what the product does with it differs:
- a prepare-side field: an action (completion, compaction, child) prepare of the
  fake-backed Prepare (``tests/unit/policy_effects/prepare_path.py``), its answer compared;
- a trigger or job field: that prepare's budget observation decided by the processor's
  control handler on the session's release (``decision_path.observed``), its report,
  request or expiry compared; a summarizing field: a job of the compaction worker;
- a field the platform fixes: its change is refused at publish.
A *referenced* row names the real-stack test that shows an effect living in SQL; that test
must exist and set the field in a release it publishes (checked with ``ast``)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from domain.compaction.control import observation
from domain.compaction.triggers import Counters, job_expired
from domain.policy.context_policy import ContextPolicy, LargeResultSettings, effective_policy
from domain.window.model_catalog import for_purpose
from schemas.errors import InvalidPolicy
from services.prepare.assembly import prepare_context
from tests.unit.policy_effects.decision_path import (
    compacted,
    decision_probe,
    groups,
    job_in_flight_for,
    request_probe,
    retried_after,
    rolled_up,
)
from tests.unit.policy_effects.prepare_path import (
    Overrides,
    Probe,
    contents,
    input_budget,
    prepare_probe,
    publish_outcome,
    question,
    retention,
    tool_names,
    tool_result,
)
from tests.unit.policy_effects.thread_scenes import (
    MARKER,
    SKILLS,
    active_skills,
    child_result,
    child_with_background,
    every_category,
    markers,
    material,
    skills_runs_apart,
)

ROOT = Path(__file__).resolve().parents[2]
Row = tuple[Overrides, Overrides, Probe]


def leaf_fields(obj: Any = None, prefix: str = "") -> set[str]:
    """Every leaf field path of the ContextPolicy (a list such as hook_bindings is one)."""
    obj = ContextPolicy() if obj is None else obj
    out: set[str] = set()
    for f in dataclasses.fields(obj):
        value, path = getattr(obj, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            out |= leaf_fields(value, path + ".")
        else:
            out.add(path)
    return out


def _nested(path: str, value: Any) -> Overrides:
    """``{"a": {"b": value}}`` for ``a.b``."""
    out: Any = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return dict(out)


async def _covered(overrides: Overrides) -> Any:
    return (await compacted(overrides))[0]


def _budget_of(purpose: str) -> Probe:
    """The input budget that purpose's prepare is given (a child's action call is the
    ``child`` purpose)."""
    if purpose == "child":
        return prepare_probe(question("action", child=True), input_budget)
    return prepare_probe(question(purpose), input_budget)


def _tools_of(purpose: str) -> Probe:
    if purpose == "child":
        return prepare_probe(question("action", child=True), tool_names)
    return prepare_probe(question(purpose), tool_names)


C = "compaction."
LOW = {"target_context_ratio": 0.5}  # lets context_ratio go below the default 0.8
SKILL_VIEW = prepare_probe(skills_runs_apart, active_skills, skill_bindings=SKILLS)
CHILD_VIEW = prepare_probe(child_with_background, material)
RETENTION_VIEW = prepare_probe(every_category, retention)
OVER_RATIO = groups(6, 420)  # ~0.85 of the input budget: the ratio trigger fires

# field path -> (base overrides, changed overrides, probe over the published release)
DIRECT: dict[str, Row] = {
    # Fixed by the platform (R10.1, R11.3, R17): the effect of a change is its refusal.
    "api_version": ({}, {"api_version": "v2"}, publish_outcome),
    "retention_rules.task": ({}, _nested("retention_rules.task", "optional"), publish_outcome),
    "purpose_profiles.compaction.tools_allowed": (
        {},
        _nested("purpose_profiles.compaction.tools_allowed", True),
        publish_outcome,
    ),
    # The processor's decision on the prepare's observation (R7, R9).
    C + "context_ratio": (
        {"compaction": LOW},
        {"compaction": LOW | {"context_ratio": 0.65}},
        decision_probe(groups(5, 400)),
    ),
    C + "user_turns": (
        {},
        {"compaction": {"user_turns": 2}},
        decision_probe(groups(3, 100), Counters(3, 5)),
    ),
    C + "model_steps": (
        {},
        {"compaction": {"model_steps": 4}},
        decision_probe(groups(3, 100), Counters(3, 5)),
    ),
    C + "retry_growth_ratio": (
        {},
        {"compaction": {"retry_growth_ratio": 0.1}},
        decision_probe(OVER_RATIO, locked=retried_after(250)),  # 5% of 3,400 is 170
    ),
    C + "job_timeout_s": ({}, {"compaction": {"job_timeout_s": 60}}, job_in_flight_for(100)),
    C + "target_context_ratio": (
        {},
        {"compaction": {"target_context_ratio": 0.4}},
        request_probe(OVER_RATIO),
    ),
    C + "max_compaction_calls": (
        {},
        {"compaction": {"max_compaction_calls": 2}},
        request_probe(OVER_RATIO),
    ),
    # The compaction worker's job (R11).
    C + "summary_max_ratio": ({}, {"compaction": {"summary_max_ratio": 0.3}}, compacted),
    "recent_complete_groups": ({}, {"recent_complete_groups": 5}, _covered),
    C + "rollup": (
        {"compaction": {"summary_max_ratio": 0.02}},  # the first job outgrows its bound
        {"compaction": {"summary_max_ratio": 0.02, "rollup": "fit"}},
        rolled_up,
    ),
    # What a prepare shows.
    "large_result_policy.inline_max_tokens": (
        {},
        {"large_result_policy": {"inline_max_tokens": 1000}},
        prepare_probe(tool_result(2000), contents),
    ),
    "large_result_policy.preview_chars": (
        {"large_result_policy": {"inline_max_tokens": 1000}},
        {"large_result_policy": {"inline_max_tokens": 1000, "preview_chars": 100}},
        prepare_probe(tool_result(3000), contents),
    ),
    **{
        f"purpose_profiles.{p}.{f}": ({}, _nested(f"purpose_profiles.{p}.{f}", v), _budget_of(p))
        for p in ("action", "completion", "compaction", "child")
        for f, v in (("model_profile_ref", "small"), ("output_reserve", 1500), ("safety_margin", 0))
    },
    **{
        f"purpose_profiles.{p}.tools_allowed": (
            {},
            _nested(f"purpose_profiles.{p}.tools_allowed", False),
            _tools_of(p),
        )
        for p in ("action", "completion", "child")
    },
    "model_limit_ref": ({}, {"model_limit_ref": "cap"}, _budget_of("action")),
    **{
        f"retention_rules.{c}": ({}, _nested(f"retention_rules.{c}", v), RETENTION_VIEW)
        for c, v in (
            ("state", "required"),
            ("summary", "required"),
            ("history", "required"),
            ("interactions", "required"),
            ("tool_results", "required"),
            ("material", "compressible"),
        )
    },
    "hook_bindings": (
        {},
        {"hook_bindings": [MARKER]},
        prepare_probe(question(), contents, markers),
    ),
    **{
        f"active_skill_policy.{f}": ({}, {"active_skill_policy": {f: v}}, SKILL_VIEW)
        for f, v in (
            ("max_active_skills", 1),
            ("max_instruction_tokens", 10),
            ("idle_runs_before_release", 1),
        )
    },
    **{
        f"child_transfer_policy.{f}": ({}, {"child_transfer_policy": {f: v}}, CHILD_VIEW)
        for f, v in (("max_background_refs", 1), ("max_background_tokens", 25))
    },
    "child_transfer_policy.max_result_tokens": (
        {},
        {"child_transfer_policy": {"max_result_tokens": 50}},
        prepare_probe(child_result(300), material),
    ),
}

# Effects that live in SQL only: the named real-stack test publishes a release setting the
# field (checked below) and shows the effect.
REFERENCED: dict[str, str] = {
    # storage.records.frontier._where: a child's constraints with or without the session's.
    "child_transfer_policy.inherit_constraints": (
        "tests/integration/test_frontier.py::"
        "test_a_child_of_a_release_that_does_not_inherit_constraints_sees_only_its_own"
    ),
}


def test_every_leaf_field_has_exactly_one_row() -> None:
    assert not set(DIRECT) & set(REFERENCED)
    assert set(DIRECT) | set(REFERENCED) == leaf_fields()


def test_the_docs_table_names_every_field() -> None:
    doc = (ROOT / "docs/policy-fields.md").read_text("utf-8")
    missing = [f for f in sorted(leaf_fields()) if f"`{f}`" not in doc]
    assert missing == []


def _policy(overrides: Overrides) -> ContextPolicy | None:
    try:
        return effective_policy(overrides)[0]
    except InvalidPolicy:
        return None


def _dotted(policy: ContextPolicy, path: str) -> Any:
    value: Any = policy
    for part in path.split("."):
        value = getattr(value, part)
    return value


async def check_row(path: str) -> None:
    """The row's change is a change of that field, and what the product does differs."""
    base_over, changed_over, probe = DIRECT[path]
    base, changed = _policy(base_over), _policy(changed_over)
    assert base is not None
    before, after = await probe(base_over), await probe(changed_over)
    if probe is publish_outcome:  # the change itself is refused at publish (R7.7, R17)
        assert before == "published" and changed is None
        assert str(after).startswith("refused:invalid_policy")
        return
    assert changed is not None and _dotted(changed, path) != _dotted(base, path)
    assert after != before, f"{path}: the product did the same with {changed_over}"


@pytest.mark.spec("R17")
@pytest.mark.parametrize("path", sorted(DIRECT))
async def test_changing_the_field_changes_the_behaviour(path: str) -> None:
    await check_row(path)


def _sets_key(test: ast.AST, path: str) -> bool:
    """Whether ``test``'s body writes ``path`` as nested dict keys (``{"a": {"b": …}}``)."""
    *outer, leaf = path.split(".")
    for node in ast.walk(test):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            if not (isinstance(key, ast.Constant) and key.value == (outer or [leaf])[0]):
                continue
            if not outer or _sets_key(value, ".".join([*outer[1:], leaf])):
                return True
    return False


def _test_function(ref: str) -> ast.AST | None:
    file, _, name = ref.partition("::")
    tree = ast.parse((ROOT / file).read_text("utf-8"))
    found = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
    ]
    return found[0] if found else None


@pytest.mark.parametrize("path", sorted(REFERENCED))
def test_the_referenced_test_exists_and_publishes_the_field(path: str) -> None:
    test = _test_function(REFERENCED[path])
    assert test is not None, f"{REFERENCED[path]} is gone"
    assert _sets_key(test, path), f"{REFERENCED[path]} publishes no release setting {path}"


def test_a_referenced_test_that_does_not_set_the_field_is_caught() -> None:
    # The default-side test of the same file publishes no inherit_constraints.
    other = (
        "tests/integration/test_frontier.py::"
        "test_a_childs_plan_is_its_own_and_it_inherits_the_constraints"
    )
    test = _test_function(other)
    assert test is not None
    assert not _sets_key(test, "child_transfer_policy.inherit_constraints")
    assert _sets_key(ast.parse('x = {"a": {"b": 1}}'), "a.b")
    assert not _sets_key(ast.parse('x = {"b": {"a": 1}}'), "a.b")


@pytest.mark.spec("R17")
async def test_the_table_catches_a_field_that_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """With Prepare budgeting every purpose on the default policy, or the processor
    expiring jobs after the default timeout, those fields' rows fail."""

    def default_profiles(policy: ContextPolicy, *rest: Any) -> Any:
        return for_purpose(ContextPolicy(), *rest)

    monkeypatch.setattr(prepare_context, "for_purpose", default_profiles)
    with pytest.raises(AssertionError, match="the product did the same"):
        await check_row("purpose_profiles.action.output_reserve")
    monkeypatch.undo()
    default_timeout = ContextPolicy().compaction.job_timeout_s
    monkeypatch.setattr(
        observation, "job_expired", lambda at, _timeout, now: job_expired(at, default_timeout, now)
    )
    with pytest.raises(AssertionError, match="the product did the same"):
        await check_row(C + "job_timeout_s")


def test_large_result_settings_are_the_policys_section() -> None:
    assert ContextPolicy().large_result == LargeResultSettings()
