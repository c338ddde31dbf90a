"""The one view of a model call that the web inspector and ``agentloom session inspect``
both show (domain/context/call_view.py): blocks in order with role, category, retention, tokens,
decision and reason; the budget bar; the summary chain."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from domain.context.call_view import CallFacts, budget_bar, call_view
from domain.context.rendering import RecordView
from schemas.answers.diagnostics import SummaryLink


def rec(seq: int, kind: str, tokens: int = 10, text: str = "", length: int = -1) -> RecordView:
    return RecordView(
        f"r{seq}", seq, "run", "main", kind, "x", text or f"text {seq}", {}, tokens, length
    )


SUMMARY = SummaryLink(
    summary_id="sum_2",
    parent_summary_id="sum_1",
    covered_ranges=((1, 3),),
    covered_record_ids=("r1", "r2", "r3"),
    summary_tokens=40,
    covered_tokens=300,
    trigger_reasons=("user_turns",),
    status="committed",
)
PARENT = replace(SUMMARY, summary_id="sum_1", parent_summary_id=None, covered_ranges=((1, 2),))


def facts(**kw: Any) -> CallFacts:
    base: dict[str, Any] = {
        "call_id": "mc_1",
        "run_id": "run",
        "instance_id": "main",
        "purpose": "action",
        "model": "m",
        "status": "completed",
        "budget": {
            "input_budget": 1000,
            "final_estimated_input": 600,
            "counting_method": "tiktoken",
            "items": {"instructions": 100, "history": 300, "summary": 40, "tools": 0},
        },
        "manifest": (
            {"block_id": "instructions", "kind": "instructions", "role": "system"},
            {"block_id": "task:r10", "kind": "task", "role": "user", "source_ids": ["r10"]},
        ),
        "dependency_versions": {
            "through_session_sequence": 5,
            "release_id": "rel_1",
            "policy_revision": "pol_1",
            "summary_id": "sum_2",
        },
        "hook_versions": ("redact@1",),
        "records": (
            rec(1, "user_input"),
            rec(2, "assistant_message"),
            rec(3, "tool_outcome", 200),
            rec(4, "user_input"),
            rec(5, "tool_outcome", 5000),  # over the inline limit
            rec(10, "user_input"),
            rec(11, "assistant_message"),
            rec(12, "tool_outcome", 30, "head", length=90_000),  # only a prefix was loaded
        ),
        "chain": (SUMMARY, PARENT),
        "inline_max_tokens": 4000,
    }
    return CallFacts(**(base | kw))


@pytest.mark.spec("R18", "R4.2", "R10.3", "R11.7")
def test_blocks_in_order_with_role_category_retention_tokens_decision_and_reason() -> None:
    view = call_view(facts())
    rows = [
        (b.block_id, b.role, b.category, b.retention, b.tokens, b.decision, b.reason)
        for b in view.blocks
    ]
    assert rows == [
        ("instructions", "system", "instructions", "required", 100, "kept", "protected_block"),
        # A summary is a labelled user note, never system (domain.authority, issue 28).
        ("summary:sum_2", "user", "summary", "active", 40, "kept", "history_summary"),
        ("rec:r1", "user", "history", "compressible", 10, "summarized", "covered_by_summary"),
        ("rec:r2", "assistant", "history", "compressible", 10, "summarized", "covered_by_summary"),
        ("rec:r3", "tool", "history", "compressible", 200, "summarized", "covered_by_summary"),
        (
            "rec:r4",
            "user",
            "history",
            "compressible",
            10,
            "kept",
            "inherited_history_not_yet_summarized",
        ),
        ("rec:r5", "tool", "history", "compressible", 5000, "externalized", "large_result_view"),
        ("rec:r10", "user", "task", "required", 10, "kept", "current_task"),
        ("rec:r11", "assistant", "interactions", "compressible", 10, "kept", "this_thread"),
        (
            "rec:r12",
            "tool",
            "tool_results",
            "compressible",
            30,
            "externalized",
            "large_result_view",
        ),
    ]
    assert [b.record_id for b in view.blocks[:2]] == [None, None]
    assert view.blocks[-1].sequence == 12 and view.blocks[-1].kind == "tool_outcome"


@pytest.mark.spec("R18", "R11.7")
def test_the_chain_newest_first_with_covered_ranges_and_the_call_facts() -> None:
    view = call_view(facts())
    assert [(s.summary_id, s.covered_ranges) for s in view.chain] == [
        ("sum_2", ((1, 3),)),
        ("sum_1", ((1, 2),)),
    ]
    assert (view.release_id, view.policy_revision, view.counting_method) == (
        "rel_1",
        "pol_1",
        "tiktoken",
    )
    d = view.to_dict()  # the CLI's --json: plain data
    assert d["blocks"][1]["block_id"] == "summary:sum_2"
    assert d["chain"][0]["covered_ranges"] == ((1, 3),)
    assert d["hook_versions"] == ("redact@1",)


@pytest.mark.spec("R10.3", "R18")
def test_a_large_result_under_a_higher_release_limit_is_kept_and_no_summary_no_summary_block() -> (
    None
):
    view = call_view(facts(inline_max_tokens=10_000, chain=()))
    by_id = {b.block_id: b for b in view.blocks}
    assert "summary:sum_2" not in by_id
    assert (by_id["rec:r5"].decision, by_id["rec:r3"].decision) == ("kept", "kept")
    assert by_id["rec:r12"].decision == "externalized"  # a prefix is never inline


@pytest.mark.spec("R18", "R6.1")
def test_budget_bar_shares_of_the_input_budget_and_the_free_rest() -> None:
    bar = budget_bar({"input_budget": 1000, "items": {"history": 300, "a": 100, "b": 100}})
    assert [(s.item, s.tokens, s.percent) for s in bar.segments] == [
        ("history", 300, 30.0),
        ("a", 100, 10.0),
        ("b", 100, 10.0),
    ]
    assert (bar.free, bar.free_percent, bar.estimated_input) == (500, 50.0, 500)
    over = budget_bar({"input_budget": 100, "final_estimated_input": 150, "items": {"x": 150}})
    assert (over.segments[0].percent, over.free, over.estimated_input) == (100.0, 0, 150)
    assert budget_bar({}).segments == ()
