"""Issue 25 findings 6 and 7: a thread retracts only records of its own view, and never a
tool result a live call still waits for — pure planning, no I/O. The real-stack tests are
tests/integration/test_retraction_scope.py."""

from __future__ import annotations

import dataclasses

import pytest

from domain.planning.batch import plan_batch
from domain.planning.state import RunState, SessionState, record_id_for
from domain.policy.retraction_rules import RetractionTarget
from schemas.contracts import (
    AssistantMessagePayload,
    ContextEvent,
    RecordKind,
    RetractionPayload,
    ToolCallSpec,
    ToolOutcomePayload,
    ToolStatus,
    Visibility,
)

from .factories import make_event
from .test_planning import active_state, batch_of


def _target(key: str) -> str:
    return record_id_for("space-1", "sess-1", key)


def retract(target_key: str, key: str, instance: str = "main", run: str = "run-1") -> ContextEvent:
    tid = _target(target_key)
    return make_event(
        RecordKind.RECORD_RETRACTED,
        key,
        run=run,
        instance=instance,
        payload=RetractionPayload(tid, "undo"),
    )


def user(key: str, instance: str = "main", run: str = "run-1") -> ContextEvent:
    return make_event(RecordKind.SUPPLEMENT, key, run=run, instance=instance)


def codes(st: SessionState, *events: ContextEvent) -> list[tuple[str, bool]]:
    plan = plan_batch(batch_of(*events), {st.session_id: st})
    return [(r.code, r.dead_letter) for r in plan.rejections]


# --- finding 6: scope -------------------------------------------------------------------


@pytest.mark.spec("R13.1", "R13.3")
@pytest.mark.parametrize(
    ("writer", "retractor"),
    [("main", "child-a"), ("child-b", "child-a"), ("child-a", "main")],
    ids=["child-of-parent", "sibling", "parent-of-child"],
)
def test_a_thread_may_not_retract_another_threads_record(writer: str, retractor: str) -> None:
    st = active_state()
    got = codes(st, user("u1", writer), retract("u1", "x1", retractor))
    assert got == [("retraction_out_of_scope", True)]


@pytest.mark.spec("R13.1")
def test_the_rule_holds_for_a_committed_target_too() -> None:
    st = active_state()
    st.retraction_targets[_target("u1")] = RetractionTarget("user_input", False, ("run-1", "main"))
    assert codes(st, retract("u1", "x1", "child-a")) == [("retraction_out_of_scope", True)]


def test_a_child_retracts_its_own_record() -> None:
    st = active_state()
    assert codes(st, user("u1", "child-a"), retract("u1", "x1", "child-a")) == []


def _two_runs(boundary: int) -> SessionState:
    st = active_state("run-2")
    st.runs["run-1"] = RunState("run-1", "main", "finished")
    st.runs["run-2"] = RunState("run-2", "main-2", "active")
    st.run_boundaries["run-2"] = boundary
    return st


@pytest.mark.spec("R2.2")
def test_a_main_thread_retracts_the_history_it_inherited() -> None:
    """What an SDK pops may be the previous question's answer (openai_agents.pop_item)."""
    st = _two_runs(boundary=10)
    st.retraction_targets[_target("u1")] = RetractionTarget(
        "assistant_message", False, ("run-1", "main"), True, 7
    )
    assert codes(st, retract("u1", "x1", "main-2", "run-2")) == []


@pytest.mark.parametrize(
    ("inheritable", "sequence"),
    [(False, 7), (True, 11)],
    ids=["a-child-record-or-private", "after-the-snapshot"],
)
def test_but_not_what_it_did_not_inherit(inheritable: bool, sequence: int) -> None:
    st = _two_runs(boundary=10)
    st.retraction_targets[_target("u1")] = RetractionTarget(
        "user_input", False, ("run-1", "main"), inheritable, sequence
    )
    assert codes(st, retract("u1", "x1", "main-2", "run-2")) == [("retraction_out_of_scope", True)]


def test_a_records_inheritability_follows_its_thread_and_visibility() -> None:
    st = active_state()
    plan_batch(
        batch_of(
            user("u1"),
            user("u2", "child-a"),
            dataclasses.replace(user("u3"), visibility=Visibility.PRIVATE),
        ),
        {st.session_id: st},
    )
    got = [st.retraction_targets[_target(k)].inheritable for k in ("u1", "u2", "u3")]
    assert got == [True, False, False]


# --- finding 7: a result a call waits for -----------------------------------------------


def _call(key: str, call_id: str) -> ContextEvent:
    payload = AssistantMessagePayload(f"op-{key}", "action", (ToolCallSpec(call_id, "f", "{}"),))
    return make_event(RecordKind.ASSISTANT_MESSAGE, key, payload=payload, operation_id=f"op-{key}")


def _outcome(key: str, call_id: str) -> ContextEvent:
    payload = ToolOutcomePayload(call_id, "f", ToolStatus.OK)
    return make_event(RecordKind.TOOL_OUTCOME, key, payload=payload, operation_id=f"tool:{call_id}")


@pytest.mark.spec("R5.1", "R5.2")
def test_the_result_of_a_live_call_is_not_retracted() -> None:
    st = active_state()
    got = codes(st, _call("a1", "c1"), _outcome("t1", "c1"), retract("t1", "x1"))
    assert got == [("retraction_of_awaited_outcome", False)]


@pytest.mark.spec("R5.1")
def test_the_same_across_batches_from_loaded_facts() -> None:
    st = active_state()
    thread = ("run-1", "main")
    st.retraction_targets[_target("t1")] = RetractionTarget(
        "tool_outcome", False, thread, True, 3, ("c1",)
    )
    st.live_calls[(thread, "c1")] = {_target("a1")}
    assert codes(st, retract("t1", "x1")) == [("retraction_of_awaited_outcome", False)]


@pytest.mark.spec("R5.1")
def test_after_its_call_is_retracted_the_result_may_be_retracted() -> None:
    st = active_state()
    events = (_call("a1", "c1"), _outcome("t1", "c1"), retract("a1", "x1"), retract("t1", "x2"))
    assert codes(st, *events) == []


def test_a_result_without_a_call_in_its_thread_may_be_retracted() -> None:
    st = active_state()
    assert codes(st, _outcome("t1", "c9"), retract("t1", "x1")) == []
