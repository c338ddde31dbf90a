"""The settings page's draft and dry run (domain/preview/form.py, dry_run.py):
the whole ContextPolicy as form fields, every issue beside its field, the effective policy
with provenance and the budgets from ``domain.preview.draft``, and what the next prepare
would do under a draft."""

from __future__ import annotations

import pytest

from domain.context.rendering import RecordView
from domain.policy.context_policy import effective_policy
from domain.policy.defaults import platform_defaults
from domain.preview.dry_run import dry_run
from domain.preview.form import (
    FIELDS,
    GENERAL,
    PATHS,
    evaluate,
    flatten,
    overrides_from_form,
    parse_value,
    sections,
)

PROFILE = {"name": "m100k", "context_capacity": 100_000, "output_reserve": 0, "safety_margin": 0}


@pytest.mark.spec("R17")
def test_every_value_of_the_policy_is_a_field_grouped_by_section() -> None:
    _, provenance = effective_policy({})
    assert set(provenance) == PATHS  # the whole policy, not the earlier four sections
    assert set(flatten(platform_defaults())) == PATHS
    names = [name for name, _ in sections()]
    assert names[:3] == ["general", "purpose_profiles", "retention_rules"]
    assert {"compaction", "large_result_policy", "child_transfer_policy"} <= set(names)
    general = [f.path for f in dict(sections())["general"]]
    assert general == ["api_version", "model_limit_ref", "recent_complete_groups", "hook_bindings"]
    kinds = {f.path: f.kind for f in FIELDS}
    assert kinds["compaction.context_ratio"] == "ratio"
    assert kinds["purpose_profiles.action.tools_allowed"] == "boolean"
    assert kinds["hook_bindings"] == "list"
    assert kinds["recent_complete_groups"] == "count"


@pytest.mark.spec("R17")
def test_form_text_to_nested_overrides_and_empty_fields_inherit() -> None:
    form = {
        "compaction.user_turns": " 3 ",
        "compaction.context_ratio": "off",
        "purpose_profiles.compaction.tools_allowed": "false",
        "purpose_profiles.action.model_profile_ref": "big",
        "hook_bindings": '[{"point": "model.chat.before", "hook": "h@1"}]',
        "recent_complete_groups": "",
        "not_a_field": "1",
    }
    assert overrides_from_form(form) == {
        "compaction": {"user_turns": 3, "context_ratio": None},
        "purpose_profiles": {
            "compaction": {"tools_allowed": False},
            "action": {"model_profile_ref": "big"},
        },
        "hook_bindings": [{"point": "model.chat.before", "hook": "h@1"}],
    }
    assert [parse_value(t) for t in ("0.5", "2", "None", "x", "[bad")] == [
        0.5,
        2,
        None,
        "x",
        "[bad",
    ]


@pytest.mark.spec("R17", "R7.7")
def test_every_issue_is_shown_beside_its_own_field_and_nothing_is_previewed() -> None:
    draft = evaluate(
        {
            "compaction.context_ratio": "1.5",
            "compaction.user_turns": "0",
            "retention_rules.task": "optional",
            "hook_bindings": '[{"bogus": 1}]',
        },
        PROFILE,
    )
    assert set(draft.errors) == {
        "compaction.context_ratio",
        "compaction.user_turns",
        "retention_rules.task",
        "hook_bindings",  # an entry's issue belongs beside the list's field
    }
    assert "(0, 1)" in draft.errors["compaction.context_ratio"]
    assert all(i["details"]["rule"] for i in draft.issues)
    assert (draft.policy, draft.effective, draft.budgets) == (None, (), [])


@pytest.mark.spec("R17", "R7.7")
def test_an_issue_across_fields_goes_beside_the_first_field_it_names() -> None:
    draft = evaluate({"compaction.context_ratio": "off"}, None)
    assert list(draft.errors) == ["compaction.context_ratio"]
    assert "trigger" in draft.errors["compaction.context_ratio"]
    assert GENERAL not in draft.errors


@pytest.mark.spec("R17", "R6.1", "R7.8")
def test_effective_policy_with_provenance_and_budgets_in_tokens_per_purpose() -> None:
    draft = evaluate({"compaction.user_turns": "3"}, PROFILE)
    rows = {r.path: r for r in draft.effective}
    assert (rows["compaction.user_turns"].value, rows["compaction.user_turns"].source) == (
        3,
        "override",
    )
    ratio = rows["compaction.context_ratio"]
    assert (ratio.value_text, ratio.source, ratio.default_text) == (
        "0.8",
        "platform default",
        "0.8",
    )
    assert rows["hook_bindings"].value_text == "[]"
    assert rows["model_limit_ref"].value_text == "off"
    action = next(b for b in draft.budgets if b["purpose"] == "action")
    assert (action["input_budget"], action["context_trigger_tokens"]) == (100_000, 80_000)
    assert (action["target_tokens"], action["user_turns"]) == (60_000, 3)
    assert {b["purpose"] for b in draft.budgets} == {"action", "completion", "compaction", "child"}
    assert draft.policy is not None and draft.policy.compaction.user_turns == 3


@pytest.mark.spec("R17", "R6.5")
def test_without_a_usable_model_profile_no_budgets_but_the_effective_policy() -> None:
    assert evaluate({}, None).budgets == []
    bad = evaluate({}, {"name": "m"})  # no confirmed context capacity
    assert bad.budgets == [] and "context_capacity" in bad.profile_error
    assert bad.effective and not bad.errors


def rec(seq: int, kind: str, tokens: int = 10, **payload: object) -> RecordView:
    return RecordView(f"r{seq}", seq, "run", "main", kind, "x", f"t{seq}", dict(payload), tokens)


def round_(start: int, result_tokens: int = 10) -> list[RecordView]:
    call = {"call_id": f"c{start}", "name": "t", "arguments_json": "{}"}
    return [
        rec(start, "user_input"),
        rec(start + 1, "assistant_message", tool_calls=[call]),
        rec(start + 2, "tool_outcome", result_tokens, call_id=f"c{start}", status="ok"),
    ]


RECORDS = round_(1) + round_(10, result_tokens=5000) + round_(20) + round_(30)
COUNTERS = {"user_turns": 4, "model_steps": 8, "baseline_user_turns": 0}


@pytest.mark.spec("R17", "R7.1", "R9.2", "R10.3")
def test_dry_run_summarizes_the_old_prefix_when_a_trigger_fires_and_externalizes_large() -> None:
    policy, _ = effective_policy({"recent_complete_groups": 1, "compaction": {"user_turns": 4}})
    run = dry_run(RECORDS, frozenset(), policy, COUNTERS, 1_000, 100_000)
    assert run.start_job and run.fired == ("user_turns",)
    actions = {r.record_id: r.action for r in run.records}
    assert {i for i, a in actions.items() if a == "summarize"} == {
        "r1", "r2", "r3", "r10", "r11", "r12", "r20", "r21", "r22"
    }  # fmt: skip
    assert actions["r30"] == actions["r32"] == "keep"  # the latest question stays
    assert run.already_summarized == 0


@pytest.mark.spec("R17", "R7.1", "R10.3")
def test_dry_run_without_a_trigger_only_says_what_would_be_summarized_later() -> None:
    policy, _ = effective_policy({"recent_complete_groups": 1})
    covered = frozenset({"r1", "r2", "r3"})  # already in the session's summary
    run = dry_run(RECORDS, covered, policy, COUNTERS, 1_000, 100_000)
    assert not run.start_job and run.fired == ()
    assert run.already_summarized == 3
    actions = {r.record_id: r.action for r in run.records}
    assert "r1" not in actions  # covered records are not in the view
    assert actions["r10"] == "summarize when a trigger fires"
    assert actions["r32"] == "keep"
    # The same draft with a lower inline limit: the large result is kept as a view.
    low, _ = effective_policy({"large_result_policy": {"inline_max_tokens": 5}})
    later = dry_run(round_(40, result_tokens=50), frozenset(), low, {}, 0, 100_000)
    assert {r.record_id: r.action for r in later.records}["r42"] == "externalize"
    # At the context trigger: the ratio fires on the processor's estimate (R7.8).
    full = dry_run(RECORDS, frozenset(), policy, {}, 80_000, 100_000)
    assert full.start_job and full.fired == ("context_ratio",)
    assert full.thresholds["context_tokens"] == 80_000
