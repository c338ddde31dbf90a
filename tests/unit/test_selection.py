"""Compaction selection: complete groups only, safe boundary, kept content, segments."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.context.rendering import RecordView
from domain.context.selection import build_groups, segment, select_prefix


def rec(seq: int, kind: str, tokens: int = 10, **payload: object) -> RecordView:
    return RecordView(
        f"r{seq}", seq, "run", "main", kind, "x", f"text {seq}", dict(payload), tokens
    )


def round_(start: int, calls: int = 1, answered: bool = True) -> list[RecordView]:
    out = [
        rec(start, "user_input"),
        rec(
            start + 1,
            "assistant_message",
            tool_calls=[
                {"call_id": f"c{start}-{i}", "name": "t", "arguments_json": "{}"}
                for i in range(calls)
            ],
        ),
    ]
    if answered:
        out += [
            rec(start + 2 + i, "tool_outcome", call_id=f"c{start}-{i}", status="ok")
            for i in range(calls)
        ]
    return out


@pytest.mark.spec("R5.1", "R11.1")
def test_one_assistant_with_several_calls_and_results_is_one_group() -> None:
    groups = build_groups(round_(1, calls=3))
    assert [g.record_ids for g in groups] == [("r1",), ("r2", "r3", "r4", "r5")]
    assert groups[1].complete and groups[1].tokens == 40


@pytest.mark.spec("R9.2", "R11.1")
def test_prefix_stops_at_an_unfinished_group_and_keeps_recent_and_latest_question() -> None:
    records = round_(1) + round_(10) + round_(20) + round_(30, answered=False)
    sel = select_prefix(build_groups(records), keep_recent=1)
    covered = {i for g in sel.covered for i in g.record_ids}
    assert covered == {"r1", "r2", "r3", "r10", "r11", "r12"}  # rounds 1 and 10
    assert "r30" not in covered and "r31" not in covered  # latest question, open group
    assert sel.source_watermark == 12
    assert sel.covered_ranges == ((1, 3), (10, 12))
    assert sel.compressible_tokens == 60


@pytest.mark.spec("R9.4")
def test_nothing_compressible_is_reported() -> None:
    sel = select_prefix(build_groups(round_(1)), keep_recent=2)
    assert sel.covered == () and sel.deferral_reason == "nothing_compressible"


def test_pinned_records_stay_verbatim() -> None:
    records = round_(1) + round_(10) + round_(20)
    sel = select_prefix(build_groups(records), keep_recent=1, pinned=frozenset({"r11"}))
    assert all("r11" not in g.record_ids for g in sel.covered)


@pytest.mark.spec("R11.2")
def test_segments_fit_the_request_budget_and_an_oversized_group_is_flagged() -> None:
    groups = build_groups([*round_(1), rec(5, "user_input", tokens=500), *round_(10)])
    segs = segment(groups, per_request_tokens=100)
    assert [s.oversized for s in segs] == [False, True, False]
    assert [g for s in segs for g in s.groups] == groups  # order kept, nothing lost
    assert all(s.tokens <= 100 for s in segs if not s.oversized)


@st.composite
def histories(draw: st.DrawFn) -> list[RecordView]:
    out: list[RecordView] = []
    seq = 1
    for _ in range(draw(st.integers(0, 12))):
        calls = draw(st.integers(0, 3))
        answered = draw(st.booleans()) if out else True
        r = round_(seq, calls=calls, answered=answered)
        out += r
        seq += len(r) + 1
    return out


@pytest.mark.spec("R5.1", "R9.2", "R11.1")
@settings(max_examples=200)
@given(records=histories(), keep=st.integers(0, 4), budget=st.integers(5, 200))
def test_selection_properties(records: list[RecordView], keep: int, budget: int) -> None:
    groups = build_groups(records)
    sel = select_prefix(groups, keep_recent=keep)
    assert all(g.complete for g in sel.covered)  # never a half group
    assert sorted(sel.covered + sel.kept, key=lambda g: g.first_sequence) == groups
    first_open = next((g.first_sequence for g in groups if not g.complete), None)
    if first_open is not None:
        assert all(g.last_sequence < first_open for g in sel.covered)
    users = [g for g in groups if g.kind == "user"]
    if users:
        assert users[-1] not in sel.covered
    segs = segment(sel.covered, budget)
    assert [g for s in segs for g in s.groups] == list(sel.covered)
    assert all(s.tokens <= budget or s.oversized for s in segs)
