"""A call whose result never comes never blocks compaction (R2.4, R5.1, R9.4, R11.1).

The group of a call without a result stops being unfinished once the agent moved past it
— a later model step completed, or a later record belongs to another run — and is then
covered whole, the summarizer shown an ``unknown`` outcome citing the call's record. While
the call is still in flight it holds the prefix back, and the deferral names it.
"""

from __future__ import annotations

import dataclasses

import pytest

from domain.compaction.drafts import SummaryRequest
from domain.compaction.extractive import extract_draft
from domain.compaction.sources import UNKNOWN_OUTCOME, source_items
from domain.compaction.triggers import CompactionState, Counters, Observation, evaluate_triggers
from domain.context.rendering import RecordView
from domain.context.selection import OPEN_CALL, build_groups, segment, select_prefix
from domain.policy.context_policy import CompactionPolicy
from schemas import codec
from schemas.wire import BudgetObservation, ControlEvent, decode_control, encode_control


def rec(seq: int, kind: str, run: str = "run1", **payload: object) -> RecordView:
    return RecordView(f"r{seq}", seq, run, "main", kind, "x", f"text {seq}", dict(payload), 10)


def call(seq: int, cid: str, run: str = "run1") -> RecordView:
    spec = {"call_id": cid, "name": "bash", "arguments_json": '{"cmd": "make"}'}
    return rec(seq, "assistant_message", run, tool_calls=[spec])


def answered_round(seq: int, run: str = "run1") -> list[RecordView]:
    return [
        rec(seq, "user_input", run),
        call(seq + 1, f"c{seq}", run),
        rec(seq + 2, "tool_outcome", run, call_id=f"c{seq}", status="ok", name="bash"),
        rec(seq + 3, "assistant_message", run),
    ]


@pytest.mark.spec("R2.4", "R5.1", "R11.1")
def test_a_call_the_agent_moved_past_is_answered_unknown_and_its_group_is_whole() -> None:
    records = [rec(1, "user_input"), call(2, "lost"), rec(3, "assistant_message")]
    groups = build_groups(records)
    lost = groups[1]
    assert lost.record_ids == ("r2",) and lost.complete and lost.open_calls == ("lost",)
    records += answered_round(10, "run2") + answered_round(20, "run3")
    sel = select_prefix(build_groups(records), keep_recent=1)
    covered = {i for g in sel.covered for i in g.record_ids}
    assert {"r1", "r2", "r3", "r10", "r11", "r12", "r13"} <= covered


@pytest.mark.spec("R2.4", "R11.1")
def test_a_call_whose_run_ended_is_answered_unknown() -> None:
    records = [rec(1, "user_input"), call(2, "lost"), rec(3, "user_input", run="run2")]
    assert build_groups(records)[1].complete
    finished = [rec(1, "user_input"), call(2, "lost"), rec(3, "run_finished")]
    assert build_groups(finished)[1].complete
    assert not build_groups(finished[:2])[1].complete  # still running: in flight


@pytest.mark.spec("R9.4", "R11.1")
def test_a_call_in_flight_holds_the_prefix_and_the_deferral_names_it() -> None:
    records = [*answered_round(1), rec(10, "user_input"), call(11, "slow")]
    # a supplement of the same run is no step: the call is still in flight
    records.append(rec(12, "supplement"))
    groups = build_groups(records)
    assert not groups[-2].complete and groups[-2].open_calls == ("slow",)
    sel = select_prefix(groups, keep_recent=2)
    assert sel.covered == () and sel.deferral_reason == f"{OPEN_CALL}:slow"
    # Without an open call, the same shortage of history is simply nothing to compress.
    assert select_prefix(build_groups(answered_round(1)), 2).deferral_reason == (
        "nothing_compressible"
    )


@pytest.mark.spec("R2.4", "R11.4")
def test_the_summarizer_sees_the_open_call_with_an_unknown_outcome_citing_the_call() -> None:
    records = [rec(1, "user_input"), call(2, "lost"), rec(3, "assistant_message")]
    records += answered_round(10, "run2") + answered_round(20, "run3")
    sel = select_prefix(build_groups(records), keep_recent=1)
    (seg,) = segment(sel.covered, 10_000)
    items = source_items(seg, {r.record_id: r for r in records})
    unknown = [i for i in items if i.tool_status == "unknown"]
    assert [(i.record_id, i.call_id, i.tool_name, i.text) for i in unknown] == [
        ("r2", "lost", "bash", UNKNOWN_OUTCOME)
    ]
    draft = extract_draft(SummaryRequest(items, None, 400, "op"))
    assert "r2" in draft.cited_ids()


@pytest.mark.spec("R9.4", "R11.1")
def test_a_check_held_back_by_a_call_in_flight_is_deferred_naming_it() -> None:
    state = CompactionState(Counters(user_turns=5))
    policy = CompactionPolicy(context_ratio=None, user_turns=5)
    held = Observation(900, 1000, 100, 0, "fp", f"{OPEN_CALL}:slow")
    decision = evaluate_triggers(state, policy, held)
    assert (decision.start_job, decision.reason) == (False, f"{OPEN_CALL}:slow")
    plain = evaluate_triggers(state, policy, Observation(900, 1000, 100, 0, "fp"))
    assert plain.reason == "nothing_compressible"


def test_an_observation_names_the_call_in_flight_on_the_wire_and_older_writers_read() -> None:
    obs = BudgetObservation(900, 1000, 100, 50, 0, 7, None, "fp", "pol", f"{OPEN_CALL}:slow")
    ev = ControlEvent("k", "ses", "run", "main", 1, obs)
    assert decode_control(encode_control(ev)) == ev
    old = {**ev.__dict__, "body": ("agentloom.context.v1.BudgetObservation", obs.__dict__)}
    old["body"] = (old["body"][0], {k: v for k, v in obs.__dict__.items() if k != "held_by"})
    earlier = decode_control(codec.encode("control_event.v1.avsc", old))
    assert earlier.body == dataclasses.replace(obs, held_by=None)
