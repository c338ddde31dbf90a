"""Long sessions (issue 9): the current task is never summarized away, the summary stays
within its bound through roll-ups, and coverage of a draft is checked. Pure."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.compaction.bound import (
    MIN_BOUND,
    chunk,
    fit_draft,
    rollup_items,
    summary_bound,
)
from domain.compaction.drafts import FACT_FIELDS, Fact, SummaryDraft, SummaryRequest
from domain.compaction.errors import InvalidSummary
from domain.compaction.extractive import extract_draft
from domain.compaction.validate import check_coverage, validate_draft
from domain.context.rendering import RecordView
from domain.context.selection import build_groups, current_task_ids, select_prefix
from domain.policy.context_policy import validate_compaction
from schemas.errors import InvalidPolicy
from storage.tokenizers import make_counter

COUNT = make_counter("cl100k_base").count


def rec(seq: int, kind: str, run: str = "run-1", **payload: object) -> RecordView:
    return RecordView(f"r{seq}", seq, run, "main", kind, "x", f"text {seq}", dict(payload), 10)


def interaction(seq: int, run: str) -> list[RecordView]:
    call = {"call_id": f"c{seq}", "name": "t", "arguments_json": "{}"}
    return [
        rec(seq, "assistant_message", run, tool_calls=[call]),
        rec(seq + 1, "tool_outcome", run, call_id=f"c{seq}", status="ok"),
    ]


# --- the current task is required (R4.4, R10.1, R11.1) ---------------------------------


@pytest.mark.spec("R4.4", "R10.1", "R11.1")
def test_question_followed_by_a_supplement_is_never_selected_for_compaction() -> None:
    """The bug: only the latest user input was kept, so a supplement after the question
    let the question itself be summarized into one line."""
    old = [rec(1, "user_input", "run-0"), *interaction(2, "run-0")]
    cur = [rec(10, "user_input"), *interaction(11, "run-1"), rec(13, "supplement")]
    cur += [x for i in range(20, 40, 2) for x in interaction(i, "run-1")]
    records = old + cur
    pinned = current_task_ids(records, "run-1")
    assert pinned == {"r10", "r13"}
    sel = select_prefix(build_groups(records), keep_recent=2, pinned=pinned)
    covered = {i for g in sel.covered for i in g.record_ids}
    assert covered and not covered & pinned
    assert {"r1", "r2", "r11"} <= covered  # the old run and early steps are summarized
    unpinned = select_prefix(build_groups(records), keep_recent=2)
    assert "r10" in {i for g in unpinned.covered for i in g.record_ids}  # the old bug


@pytest.mark.spec("R4.4", "R11.1")
@settings(max_examples=150, deadline=None)
@given(
    plan=st.lists(st.sampled_from(["user", "supplement", "step", "run"]), min_size=1, max_size=40),
    keep=st.integers(0, 3),
)
def test_no_user_input_of_the_current_run_is_ever_covered(plan: list[str], keep: int) -> None:
    records: list[RecordView] = []
    run, seq = 0, 1
    for action in plan:
        if action == "run":
            run += 1
            records.append(rec(seq, "user_input", f"run-{run}"))
            seq += 1
        elif action in ("user", "supplement"):
            records.append(
                rec(seq, "user_input" if action == "user" else "supplement", f"run-{run}")
            )
            seq += 1
        else:
            records += interaction(seq, f"run-{run}")
            seq += 2
    current = f"run-{run}"
    pinned = current_task_ids(records, current)
    sel = select_prefix(build_groups(records), keep_recent=keep, pinned=pinned)
    covered = {i for g in sel.covered for i in g.record_ids}
    task = {r.record_id for r in records if r.run_id == current and r.kind != "assistant_message"}
    task = {i for i in task if i in pinned}
    assert not covered & task


# --- a bounded summary (R11.2, R11.8) --------------------------------------------------


@pytest.mark.spec("R11.2", "R7.7")
def test_summary_max_ratio_defaults_to_fifteen_percent_and_is_validated_at_publish() -> None:
    assert validate_compaction({}).summary_max_ratio == 0.15
    assert summary_bound(0.15, 100_000) == 15_000
    for bad in (0, 1, 1.5, -0.1, "0.2", True):
        with pytest.raises(InvalidPolicy) as err:
            validate_compaction({"summary_max_ratio": bad})
        assert err.value.details["field"] == "summary_max_ratio"


def fact(i: int, words: int = 12) -> Fact:
    return Fact(f"Q: question {i} " + "word " * words + f"→ A: answer {i}", (f"r{i}", f"r{i}a"))


def big_draft(n: int, failures: int = 3) -> SummaryDraft:
    return SummaryDraft(
        verified_facts=tuple(fact(i) for i in range(n)),
        decisions=tuple(Fact(f"decided to use plan {i}", (f"d{i}",)) for i in range(n // 4)),
        failures=tuple(Fact(f"tool t failed: boom {i}", (f"f{i}",)) for i in range(failures)),
        unresolved_questions=(Fact("is the cache still warm?", ("u1",)),),
        work_artifact_refs=tuple(f"src/file_{i}.py" for i in range(n)),
        observations=tuple(f"{i} records, sequences {i}-{i + 5}" for i in range(n // 2)),
    )


@pytest.mark.spec("R11.2", "R11.8")
@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 120), bound=st.integers(80, 3000), failures=st.integers(0, 5))
def test_fit_draft_always_holds_the_bound_and_drops_the_least_important_oldest_first(
    n: int, bound: int, failures: int
) -> None:
    draft = big_draft(n, failures)
    fitted, dropped = fit_draft(draft, bound, COUNT)
    assert COUNT(fitted.text()) <= bound
    assert fitted.all_facts()  # never empty
    assert dropped == (
        len(draft.all_facts())
        + len(draft.work_artifact_refs)
        + len(draft.observations)
        - len(fitted.all_facts())
        - len(fitted.work_artifact_refs)
        - len(fitted.observations)
    )
    # oldest first: what is kept of each section is its newest entries
    for name in ("verified_facts", "decisions", "failures", "unresolved_questions"):
        kept = getattr(fitted, name)
        assert kept == getattr(draft, name)[len(getattr(draft, name)) - len(kept) :]
    # failures and open questions go last: kept whole while any plain fact remains
    if fitted.verified_facts:
        assert fitted.failures == draft.failures
        assert fitted.unresolved_questions == draft.unresolved_questions


@pytest.mark.spec("R11.8")
def test_a_draft_within_its_bound_is_untouched() -> None:
    draft = big_draft(3)
    assert fit_draft(draft, 10_000, COUNT) == (draft, 0)


@pytest.mark.spec("R11.2", "R11.8")
def test_extractive_roll_up_keeps_real_citations_and_prefers_failures() -> None:
    draft = big_draft(200, failures=4)
    items = rollup_items(draft)
    assert len(items) == len(draft.all_facts())
    assert all(i.record_id.startswith(("r", "d", "f", "u")) for i in items)
    parts = chunk(items, 1500, COUNT)
    assert len(parts) > 1 and sum(len(p) for p in parts) == len(items)
    assert all(sum(COUNT(i.text) + 8 for i in p) <= 1500 for p in parts)
    out = extract_draft(SummaryRequest(items, None, 300, "op:rollup:0"))
    validate_draft(out, frozenset(i.record_id for i in items), 300 * 6)
    assert len(out.text()) <= 4 * 300
    assert {f.source_ids[0] for f in out.failures} == {"f0", "f1", "f2", "f3"}
    assert len(out.all_facts()) < len(draft.all_facts())


# --- coverage (R11.4, R11.7) -----------------------------------------------------------


@pytest.mark.spec("R11.4", "R11.7")
def test_coverage_every_covered_record_is_cited_or_in_a_covered_range() -> None:
    draft = SummaryDraft((Fact("x", ("r1",)),), (), (), (), (), ())
    check_coverage(draft, {"r1": 1, "r2": 2}, [(1, 2)])
    with pytest.raises(InvalidSummary) as gap:
        check_coverage(draft, {"r1": 1, "r2": 2, "r9": 9}, [(1, 2)])
    assert gap.value.details["reason"] == "coverage_gap"
    assert gap.value.details["record_id"] == "r9"
    outside = dataclasses.replace(draft, failures=(Fact("y", ("r7",)),))
    with pytest.raises(InvalidSummary) as out:
        check_coverage(outside, {"r1": 1}, [(1, 1)])
    assert out.value.details["reason"] == "source_out_of_range"
    check_coverage(outside, {"r1": 1}, [(1, 1)], earlier=frozenset({"r7"}))  # via the parent


@pytest.mark.spec("R11.2", "R11.8")
def test_one_overlong_entry_is_clipped_to_the_bound_never_left_over_it() -> None:
    huge = SummaryDraft((Fact("detail " * 3000, ("r1", "r2", "r3")),), (), (), (), (), ())
    fitted, _ = fit_draft(huge, 100, COUNT)
    assert COUNT(fitted.text()) <= 100
    (only,) = fitted.all_facts()
    assert only.statement.endswith("…") and only.source_ids == ("r1", "r2")


def record_id(n: int) -> str:
    return f"rec_{n:032x}"  # the real shape: ~20 tokens each


@pytest.mark.spec("R11.2", "R11.8")
@settings(max_examples=80, deadline=None)
@given(
    bound=st.integers(MIN_BOUND, 200),
    entries=st.lists(
        st.tuples(st.sampled_from(FACT_FIELDS), st.text(max_size=400), st.integers(1, 40)),
        min_size=1,
        max_size=12,
    ),
)
def test_fit_draft_holds_even_the_smallest_bound_against_long_citation_lists(
    bound: int, entries: list[tuple[str, str, int]]
) -> None:
    """A model may cite forty records for one short statement: the bound still holds,
    down to MIN_BOUND, and what is kept still cites a record it was given."""
    sections: dict[str, list[Fact]] = {name: [] for name in FACT_FIELDS}
    n = 0
    for name, statement, cited in entries:
        sections[name].append(Fact(statement, tuple(record_id(n + k) for k in range(cited))))
        n += cited
    draft = SummaryDraft(*(tuple(sections[name]) for name in FACT_FIELDS), (), ())
    fitted, _ = fit_draft(draft, bound, COUNT)
    assert COUNT(fitted.text()) <= bound
    given_ids = {i for f in draft.all_facts() for i in f.source_ids}
    assert fitted.all_facts() and all(
        f.source_ids and set(f.source_ids) <= given_ids for f in fitted.all_facts()
    )


@pytest.mark.spec("R11.4")
@settings(max_examples=100, deadline=None)
@given(
    ranges=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=6),
    seqs=st.lists(st.integers(0, 90), min_size=1, max_size=10, unique=True),
)
def test_coverage_by_ranges_matches_a_plain_scan(
    ranges: list[tuple[int, int]], seqs: list[int]
) -> None:
    spans = [(lo, lo + width) for lo, width in ranges]  # possibly overlapping, unsorted
    draft = SummaryDraft((Fact("x", ("cited",)),), (), (), (), (), ())
    covered = {f"r{s}": s for s in seqs} | {"cited": 999}
    expected_gap = [s for s in seqs if not any(lo <= s <= hi for lo, hi in spans)]
    try:
        check_coverage(draft, covered, spans)
        assert expected_gap == []
    except InvalidSummary as exc:
        assert exc.details["reason"] == "coverage_gap"
        assert exc.details["session_sequence"] in expected_gap
