"""Issue 28 (3): every leaf field of the ContextPolicy has a proven effect, or is listed as
not yet having one (docs/policy-fields.md). The rows are derived from the policy's own
field list: a new field without a row here fails.

Each row changes one field and shows, through the pure function the product calls, an
observable that differs. Fields whose effect lives in I/O code (the processor, Prepare,
the compaction worker) are ``REFERENCED`` to the real-stack or fake-backed test that shows
it; the test below checks that test still exists."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from domain.compaction.bound import summary_bound
from domain.compaction.control import (
    JobStart,
    LockedState,
    ObservationInputs,
    judge_observation,
    observation_effects,
)
from domain.compaction.triggers import (
    CompactionState,
    Counters,
    LastAttempt,
    Observation,
    evaluate_triggers,
    job_expired,
)
from domain.context.rendering import RecordView, ThreadRenderer
from domain.context.selection import build_groups, select_prefix
from domain.policy.context_policy import ContextPolicy, LargeResultSettings, effective_policy
from domain.window.budget import ModelProfile
from domain.window.model_catalog import ModelCatalog, for_purpose
from schemas.errors import InvalidPolicy
from schemas.wire import BudgetObservation, ControlEvent
from tests.unit.test_skill_and_child_limits import active_skills_probe, child_transfer_probe

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_700_000_000_000
BUDGET = 1000
Probe = Callable[[ContextPolicy], Any]


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


def _policy(overrides: dict[str, Any]) -> ContextPolicy | str:
    try:
        return effective_policy(overrides)[0]
    except InvalidPolicy as exc:
        return f"refused:{exc.details.get('rule')}"


def _trigger(
    policy: ContextPolicy, estimated: int = 700, **state: Any
) -> tuple[bool, tuple[str, ...]]:
    st = CompactionState(totals=Counters(3, 5), **state)
    d = evaluate_triggers(st, policy.compaction, Observation(estimated, BUDGET, 100, 600, "fp"))
    return d.start_job, d.fired


def _retry(policy: ContextPolicy) -> bool:
    # A persistently due session whose compressible content grew by 6% of the budget.
    last = LastAttempt("old", 540, Counters(3, 5), BUDGET, 100)
    return _trigger(policy, 900, last_attempt=last)[0]


def _request(policy: ContextPolicy) -> tuple[int, int]:
    o = BudgetObservation(900, BUDGET, 100, 50, 600, 7, None, "fp", "pol-1")
    inp = ObservationInputs(
        ControlEvent("obs-1", "s1", "run-1", "main", NOW, o),
        o,
        "main",
        policy.compaction,
        "pol-1",
        LockedState(None, None, attempts=0),
        None,
        Counters(3, 4),
        Counters(0, 0),
        None,
    )
    start = JobStart("cmp_new", 2)
    fx = observation_effects(inp, judge_observation(inp, NOW), start, NOW)
    assert fx.request is not None
    return fx.request.target_tokens, fx.request.max_calls


def _large(policy: ContextPolicy) -> tuple[bool, int]:
    rend = ThreadRenderer(count=len, large=policy.large_result_policy)
    text = "x" * 3000
    r = SimpleNamespace(
        token_count=3000, full_length=3000, text=text, content_length=-1, record_id="r1"
    )
    view = rend._view_of(r, "c1", "tool", "ok")  # type: ignore[arg-type]
    return rend._is_large(r), len(view)  # type: ignore[arg-type]


def _kept(policy: ContextPolicy) -> int:
    """``select_prefix`` as the worker, Prepare's compressible estimate and the console's
    dry run call it: how many complete groups stay verbatim."""
    records: list[RecordView] = []
    for seq in range(1, 20, 2):
        call = {"call_id": f"c{seq}", "name": "t", "arguments_json": "{}"}
        records.append(
            RecordView(
                f"r{seq}",
                seq,
                "run-0",
                "main",
                "assistant_message",
                "x",
                "a",
                {"tool_calls": [call]},
                10,
            )
        )
        records.append(
            RecordView(
                f"r{seq + 1}",
                seq + 1,
                "run-0",
                "main",
                "tool_outcome",
                "x",
                "b",
                {"call_id": f"c{seq}", "status": "ok"},
                10,
            )
        )
    return len(select_prefix(build_groups(records), policy.recent_complete_groups).kept)


_OWN = ModelProfile("own", 8000, 1000, 200)
_CATALOG = ModelCatalog({"small": ModelProfile("small", 3000, 300, 50)}, {"cap": 4000})


def _budget(purpose: str) -> Probe:
    """The input budget a call of ``purpose`` gets (``domain.window.model_catalog.for_purpose``,
    as Prepare and the preview call it)."""

    def probe(policy: ContextPolicy) -> int:
        p = for_purpose(policy, purpose, _OWN, _CATALOG.profiles, _CATALOG.limits)
        return p.input_budget()

    return probe


C = "compaction."
# field path -> (base overrides, changed overrides, probe over the effective policy)
DIRECT: dict[str, tuple[dict[str, Any], dict[str, Any], Probe | None]] = {
    "api_version": ({}, {"api_version": "v2"}, None),
    "recent_complete_groups": ({}, {"recent_complete_groups": 5}, _kept),
    C + "context_ratio": (
        {"compaction": {"target_context_ratio": 0.5}},
        {"compaction": {"target_context_ratio": 0.5, "context_ratio": 0.65}},
        _trigger,
    ),
    C + "user_turns": ({}, {"compaction": {"user_turns": 2}}, _trigger),
    C + "model_steps": ({}, {"compaction": {"model_steps": 4}}, _trigger),
    C + "retry_growth_ratio": ({}, {"compaction": {"retry_growth_ratio": 0.1}}, _retry),
    C + "job_timeout_s": (
        {},
        {"compaction": {"job_timeout_s": 60}},
        lambda p: job_expired(NOW, p.compaction.job_timeout_s, NOW + 100_000),
    ),
    C + "target_context_ratio": ({}, {"compaction": {"target_context_ratio": 0.4}}, _request),
    C + "max_compaction_calls": ({}, {"compaction": {"max_compaction_calls": 2}}, _request),
    C + "summary_max_ratio": (
        {},
        {"compaction": {"summary_max_ratio": 0.3}},
        lambda p: summary_bound(p.compaction.summary_max_ratio, 10_000),
    ),
    "large_result_policy.inline_max_tokens": (
        {},
        {"large_result_policy": {"inline_max_tokens": 1000}},
        _large,
    ),
    "large_result_policy.preview_chars": (
        {},
        {"large_result_policy": {"preview_chars": 100}},
        _large,
    ),
    **{
        f"purpose_profiles.{p}.{f}": ({}, {"purpose_profiles": {p: {f: v}}}, _budget(p))
        for p in ("action", "completion", "compaction", "child")
        for f, v in (
            ("model_profile_ref", "small"),
            ("output_reserve", 1500),
            ("safety_margin", 0),
        )
    },
    "model_limit_ref": ({}, {"model_limit_ref": "cap"}, _budget("action")),
    "active_skill_policy.max_active_skills": (
        {},
        {"active_skill_policy": {"max_active_skills": 1}},
        active_skills_probe,
    ),
    "active_skill_policy.max_instruction_tokens": (
        {},
        {"active_skill_policy": {"max_instruction_tokens": 10}},
        active_skills_probe,
    ),
    "active_skill_policy.idle_runs_before_release": (
        {},
        {"active_skill_policy": {"idle_runs_before_release": 1}},
        active_skills_probe,
    ),
    "child_transfer_policy.max_background_refs": (
        {},
        {"child_transfer_policy": {"max_background_refs": 1}},
        child_transfer_probe,
    ),
    "child_transfer_policy.max_background_tokens": (
        {},
        {"child_transfer_policy": {"max_background_tokens": 25}},
        child_transfer_probe,
    ),
    "child_transfer_policy.max_result_tokens": (
        {},
        {"child_transfer_policy": {"max_result_tokens": 50}},
        child_transfer_probe,
    ),
    # Fixed by the platform (R10.1, R11.3): the effect of a change is its refusal.
    "retention_rules.task": ({}, {"retention_rules": {"task": "optional"}}, None),
    "purpose_profiles.compaction.tools_allowed": (
        {},
        {"purpose_profiles": {"compaction": {"tools_allowed": True}}},
        None,
    ),
}

_RET = (
    "tests/unit/test_retention_rules.py::"
    "test_each_retention_class_of_each_category_changes_the_prepare"
)
_PP = "tests/integration/test_purpose_profiles.py::"
REFERENCED: dict[str, str] = {
    **{
        f"retention_rules.{c}": _RET
        for c in ("state", "summary", "history", "interactions", "tool_results", "material")
    },
    "hook_bindings": (
        "tests/integration/test_release_hooks.py::"
        "test_only_the_release_that_binds_a_prepare_and_model_hook_sees_its_effects"
    ),
    **{
        f"purpose_profiles.{p}.tools_allowed": _PP + "test_a_purpose_without_tools_is_offered_none"
        for p in ("action", "completion", "child")
    },
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


@pytest.mark.parametrize("path", sorted(DIRECT))
def test_changing_the_field_changes_the_behaviour(path: str) -> None:
    base_over, changed_over, probe = DIRECT[path]
    base, changed = _policy(base_over), _policy(changed_over)
    assert isinstance(base, ContextPolicy)
    if probe is None:  # the change itself is refused at publish (R7.7, R17)
        assert isinstance(changed, str) and changed.startswith("refused:")
        return
    assert isinstance(changed, ContextPolicy)
    assert _dotted(changed, path) != _dotted(base, path)
    assert probe(changed) != probe(base)


@pytest.mark.parametrize("path", sorted(REFERENCED))
def test_the_referenced_test_exists(path: str) -> None:
    file, _, name = REFERENCED[path].partition("::")
    tree = ast.parse((ROOT / file).read_text("utf-8"))
    names = {
        n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert name in names


def _dotted(policy: ContextPolicy, path: str) -> Any:
    value: Any = policy
    for part in path.split("."):
        value = getattr(value, part)
    return value


def test_large_result_settings_are_the_policys_section() -> None:
    assert ContextPolicy().large_result == LargeResultSettings()
