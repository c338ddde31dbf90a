"""A call whose result never comes — or was retracted (issue 15) — does not end the
compressible prefix once a later model turn or another run closed its group: the result
stays unknown, as the renderer shows it (issue 28: the session never compacted again)."""

from __future__ import annotations

import pytest

from domain.rendering import RecordView
from domain.selection import build_groups, select_prefix


def rec(seq: int, kind: str, run: str = "run", **payload: object) -> RecordView:
    return RecordView(f"r{seq}", seq, run, "main", kind, "x", f"text {seq}", dict(payload), 10)


def call(seq: int, run: str = "run") -> RecordView:
    tool_calls = [{"call_id": f"c{seq}", "name": "t", "arguments_json": "{}"}]
    return rec(seq, "assistant_message", run, tool_calls=tool_calls)


def answer(seq: int, call_seq: int, run: str = "run") -> RecordView:
    return rec(seq, "tool_outcome", run, call_id=f"c{call_seq}", status="ok")


def question(seq: int, run: str) -> list[RecordView]:
    return [rec(seq, "user_input", run), call(seq + 1, run), answer(seq + 2, seq + 1, run)]


@pytest.mark.spec("R11.8", "R15.3", "R9.4")
def test_a_later_model_turn_closes_a_group_whose_result_is_missing() -> None:
    # Run C: the result of call 2 was retracted; the model went on (record 3).
    records = [rec(1, "user_input", "C"), call(2, "C"), rec(3, "assistant_message", "C")]
    records += question(10, "E") + question(20, "F")
    groups = build_groups(records)
    assert [g.complete for g in groups] == [True] * len(groups)
    covered = {i for g in select_prefix(groups, keep_recent=1).covered for i in g.record_ids}
    assert {"r1", "r2", "r3", "r10", "r11", "r12"} <= covered


@pytest.mark.spec("R11.8", "R15.3")
def test_another_run_closes_it_too_and_a_late_result_still_joins_its_group() -> None:
    records = [rec(1, "user_input", "C"), call(2, "C"), rec(3, "run_started", "E")]
    assert [g.complete for g in build_groups(records)] == [True, True, True]
    records.append(answer(4, 2, "C"))  # a late result: same group, never split (R5.1)
    groups = build_groups(records)
    assert [(g.record_ids, g.complete) for g in groups] == [
        (("r1",), True),
        (("r2", "r4"), True),
        (("r3",), True),
    ]


@pytest.mark.spec("R9.2", "R11.1")
def test_the_call_in_flight_still_ends_the_prefix() -> None:
    records = question(1, "C") + question(10, "C") + [rec(20, "user_input", "C"), call(21, "C")]
    records.append(rec(22, "supplement", "C"))  # the user adds a note: no model turn yet
    groups = build_groups(records)
    assert not groups[-2].complete  # call 21 waits for its result
    sel = select_prefix(groups, keep_recent=1)
    assert "r21" not in {i for g in sel.covered for i in g.record_ids}
