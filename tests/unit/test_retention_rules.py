"""Retention rules take effect on a prepare (issue 28, R10.1, R10.2, R10.5, R17): the pure
assembler reads the release's ``retention_rules``, not a fixed table. For every block
category and every class, what the class does to that category's blocks."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from domain.context.assemble import Assembled, Material, assemble
from domain.context.rendering import RecordView, ThreadRenderer
from domain.policy.context_policy import ContextPolicy
from domain.policy.sections import RetentionRules
from domain.window.budget import ModelProfile, enforce
from domain.window.retention import retained_record_ids
from schemas.errors import ContextBudgetExceeded

CATEGORIES = ("state", "summary", "history", "interactions", "tool_results", "material")
CLASSES = ("required", "active", "compressible", "optional")
DEFAULTS = ContextPolicy().retention_rules
# Nothing optional but the category under test: each case shows that category's effect.
NONE_OPTIONAL = dataclasses.replace(DEFAULTS, material="compressible")
OV = 4


def words(text: str) -> int:
    return len(text.split())


def _rec(seq: int, run: str, kind: str, text: str, **payload: Any) -> RecordView:
    return RecordView(f"rec-{seq}", seq, run, "main", kind, "host", text, payload, words(text))


def thread() -> ThreadRenderer:
    """A block of every category: the summary, an earlier run's exchange (history), a
    state note, the task, a tool group (interactions + tool_results), a closing answer
    (interactions) and a child's result (material)."""
    t = ThreadRenderer(words, OV, summary_id="sum-1")
    t.add_summary("Earlier the team chose plan B over plan A.", 9)
    call = {"call_id": "c1", "name": "grep", "arguments_json": json.dumps({"q": "x"})}
    for rec, inherited in (
        (_rec(1, "run-0", "user_input", "What was the old question?"), True),
        (_rec(2, "run-0", "assistant_message", "The old answer, in some words."), True),
        (_rec(3, "run-1", "resource_activation", "", resource_kind="doc", resource_id="d"), False),
        (_rec(4, "run-1", "user_input", "Find every x in the repository."), False),
        (_rec(5, "run-1", "assistant_message", "Searching now.", tool_calls=[call]), False),
        (
            _rec(6, "run-1", "tool_outcome", "x found in a.py b.py", call_id="c1", status="ok"),
            False,
        ),
        (_rec(7, "run-1", "assistant_message", "Found it in two files."), False),
        (_rec(8, "run-1", "child_result", "The child checked c.py too."), False),
    ):
        if not inherited:
            t.seal_inherited()
        t.feed(rec, inherited)
    return t


PASSAGE = Material("kb-1", "1", "A retrieved passage about x.")


def build(rules: RetentionRules, budget: int = 100_000) -> Assembled:
    return assemble(
        profile=ModelProfile("m", 200_000, 0, 0, input_limit=budget, counting="estimate"),
        counting_method="test:words",
        count=words,
        instructions="Be careful.",
        skill_bindings=(),
        tools=(),
        thread=thread(),
        material=(PASSAGE,),
        retention=rules,
    )


def of(out: Assembled, category: str) -> list[dict[str, Any]]:
    return [m for m in out.messages if m["category"] == category]


@pytest.mark.spec("R10.1", "R10.2", "R10.5", "R17")
@pytest.mark.parametrize("value", CLASSES)
@pytest.mark.parametrize("category", CATEGORIES)
def test_each_retention_class_of_each_category_changes_the_prepare(
    category: str, value: str
) -> None:
    rules = dataclasses.replace(NONE_OPTIONAL, **{category: value})
    base = build(dataclasses.replace(NONE_OPTIONAL, **{category: "compressible"}))
    roomy = build(rules)
    blocks = of(roomy, category)
    assert blocks and {m["retention"] for m in blocks} == {value}  # labelled as configured
    tokens = sum(m["tokens"] for m in blocks)
    protected = {p.block_id for p in roomy.manifest}
    ids = {m["block_id"] for m in blocks}
    # required: counted as required and protected from hooks (R10.1, R10.5).
    if value == "required":
        assert roomy.report.required == base.report.required + tokens
        assert ids <= protected
    else:
        assert roomy.report.required == base.report.required
        assert not ids & protected
    # Over the budget by this category's size: only optional blocks go (R10.2 step 3). A
    # call stays with its results (R5.1): optional calls go with optional results only.
    total = roomy.report.estimated_input
    tight = build(rules, budget=total - tokens)
    dropped = {d["block_id"] for d in tight.decisions if d["reason"] == "optional_over_budget"}
    if value == "optional":
        grouped = [m["block_id"] for m in blocks if m.get("tool_calls")]
        assert [m["block_id"] for m in of(tight, category)] == grouped
        assert ids - set(grouped) <= dropped and not dropped & set(grouped)
        assert tight.report.estimated_input < total
    else:
        assert [m["block_id"] for m in of(tight, category)] == [m["block_id"] for m in blocks]
        assert not ids & dropped
    # Required content alone over the budget is a precise error; anything else over it is
    # for compaction to reduce.
    short = build(rules, budget=roomy.report.required - 1 if value == "required" else total - 1)
    if value != "optional":
        with pytest.raises(ContextBudgetExceeded) as err:
            enforce(short.report)
        want = "required_over_budget" if value == "required" else "history_over_budget"
        assert err.value.details["reason"] == want


@pytest.mark.spec("R10.1", "R11.1", "R17")
@pytest.mark.parametrize("value", CLASSES)
@pytest.mark.parametrize("category", ("history", "interactions", "tool_results", "material"))
def test_required_and_active_conversation_blocks_are_never_compacted(
    category: str, value: str
) -> None:
    t = thread()
    rules = dataclasses.replace(DEFAULTS, **{category: value})
    pinned = retained_record_ids(t.records, "run-1", rules)
    shown = {i for m in t.messages if m["category"] == category for i in m["record_ids"]}
    assert shown
    assert (shown <= pinned) if value in ("required", "active") else not (shown & pinned)


@pytest.mark.spec("R10.1", "R17")
def test_the_platform_defaults_pin_nothing_and_label_as_before() -> None:
    t = thread()
    assert retained_record_ids(t.records, "run-1", DEFAULTS) == frozenset()
    out = build(DEFAULTS)
    labels = {m["category"]: m["retention"] for m in out.messages if m["category"] in CATEGORIES}
    assert labels == {c: getattr(DEFAULTS, c) for c in CATEGORIES}
    assert dataclasses.asdict(DEFAULTS)["task"] == "required"


@pytest.mark.spec("R5.1", "R10.2")
def test_a_tool_group_goes_whole_or_not_at_all() -> None:
    # Results optional, the call compressible: the group goes whole, never split.
    rules = dataclasses.replace(DEFAULTS, tool_results="optional", material="compressible")
    roomy = build(rules)
    group = [m for m in roomy.messages if m.get("tool_calls") or m["role"] == "tool"]
    tight = build(rules, budget=roomy.report.estimated_input - 1)
    left = [m for m in tight.messages if m.get("tool_calls") or m["role"] == "tool"]
    assert len(group) == 2 and left == []
    # The call optional but its results not: the group stays.
    rules = dataclasses.replace(DEFAULTS, interactions="optional", material="compressible")
    tight = build(rules, budget=build(rules).report.estimated_input - 1)
    assert [m["role"] for m in tight.messages if m.get("tool_calls") or m["role"] == "tool"] == [
        "assistant",
        "tool",
    ]
