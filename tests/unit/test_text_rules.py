"""No heuristic fails a job (R11.4, R11.5, R19): the text rules frame or mark one entry and
record what they did; a draft is refused only for structural reasons."""

from __future__ import annotations

import ast
import pathlib

import pytest

from domain.compaction.core.render import summary_heading
from domain.compaction.drafts import Fact, SummaryDraft
from domain.compaction.text_rules import STRUCTURAL_FAILURES, apply_text_rules, framed
from domain.frontier import Item, Plan, plan_contradiction

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLAN = Plan(
    version=3,
    items=(
        Item("p1", "Fix the parser", "in_progress"),
        Item("p2", "Run tests", "pending"),
        Item("p3", "收集场地报价", "done"),
    ),
)


def draft(*statements: str) -> SummaryDraft:
    facts = tuple(Fact(s, ("r1",)) for s in statements)
    return SummaryDraft(facts, (), (), (), (), ())


def _raised_reasons(path: pathlib.Path) -> set[str]:
    """Every literal ``reason=`` an ``InvalidSummary`` is raised with in ``path``."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "InvalidSummary":
            for kw in node.keywords:
                if kw.arg == "reason" and isinstance(kw.value, ast.Constant):
                    out.add(str(kw.value.value))
                elif kw.arg == "reason" and isinstance(kw.value, ast.IfExp):
                    for side in (kw.value.body, kw.value.orelse):
                        if isinstance(side, ast.Constant):
                            out.add(str(side.value))
    return out


@pytest.mark.spec("R11.4", "R19")
def test_a_job_fails_only_for_structural_reasons() -> None:
    """The list of what may refuse a draft: its shape, citations, coverage and size."""
    assert {
        "unparseable",
        "missing_field",
        "empty",
        "empty_statement",
        "uncited",
        "unknown_source_id",
        "source_out_of_range",
        "coverage_gap",
        "too_long",
    } == STRUCTURAL_FAILURES
    raised: set[str] = set()
    for path in (ROOT / "domain" / "compaction").rglob("*.py"):
        raised |= _raised_reasons(path)
    assert raised, "the scan found no refusal at all: it cannot be checking anything"
    assert raised <= STRUCTURAL_FAILURES, raised - STRUCTURAL_FAILURES


@pytest.mark.spec("R11.4", "R19")
@pytest.mark.parametrize(
    ("statement", "item_id"),
    [
        ("Decision: fix the parser — dropped the regex approach", "p1"),
        ("Run tests: done in 3 s", "p2"),
        ("Fix the parser is done.", "p1"),  # a real contradiction: dated, not refused
        ("收集场地报价仍在进行中", "p3"),  # named in Chinese, no spaces
        ("The lexer reads tokens.", None),
    ],
)
def test_an_entry_naming_a_plan_item_is_dated_and_recorded_never_refused(
    statement: str, item_id: str | None
) -> None:
    out, decisions = apply_text_rules(draft(statement), PLAN)
    (fact,) = out.verified_facts
    if item_id is None:
        assert fact.statement == statement and decisions == ()
        return
    assert fact.statement == f"earlier (plan v3): {statement}"
    (d,) = decisions
    assert (d.rule, d.action, d.field, d.item_id, d.source_ids) == (
        "plan_item_named",
        "framed",
        "verified_facts",
        item_id,
        ("r1",),
    )
    assert plan_contradiction(fact.statement, PLAN) is None


def test_the_rules_are_idempotent_a_parents_framed_entry_keeps_its_date() -> None:
    once, _ = apply_text_rules(draft("Fix the parser is done."), PLAN)
    later = Plan(version=7, items=PLAN.items)
    twice, decisions = apply_text_rules(once, later)
    assert twice == once and decisions == ()
    assert framed(twice.verified_facts[0].statement)


@pytest.mark.spec("R11.4")
def test_a_summary_written_under_a_plan_is_dated_as_a_whole() -> None:
    assert summary_heading(Plan()) == ""
    assert summary_heading(PLAN).startswith("(written at plan v3: ")


def test_the_status_pattern_ends_where_the_status_word_ends() -> None:
    assert plan_contradiction("Run tests: done in 3 s", PLAN) is None
    assert plan_contradiction("Run tests: done.", PLAN) == (PLAN.items[1], "done")


@pytest.mark.spec("R11.4")
def test_an_entry_recorded_by_its_author_is_never_reworded() -> None:
    from domain.compaction.drafts import RECORDED

    recorded = Fact("Fix the parser: done, we keep the regex.", ("r1",), RECORDED)
    d = SummaryDraft((), (recorded,), (), (), (), ())
    out, decisions = apply_text_rules(d, PLAN, ("we keep the regex",))
    assert out == d and decisions == ()
