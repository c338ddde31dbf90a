"""Retractions (issue 15): validation, planning and rendering of ``record_retracted`` —
pure, no I/O. What a retraction does on the real stack is in
tests/integrations/test_openai_agents.py."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from domain.context.rendering import RecordView, ThreadRenderer
from domain.planning.batch import plan_batch
from domain.planning.state import SessionState, record_id_for
from domain.policy.retraction_rules import RETRACTABLE, RetractionTarget
from schemas.contracts import Authority, ContextEvent, RecordKind, RetractionPayload
from schemas.errors import InvalidEvent
from schemas.validation import validate_event

from .factories import TARGET_RECORD_ID, make_event
from .test_planning import active_state, batch_of

TARGET = record_id_for("space-1", "sess-1", "u1")


def retraction(target: str = TARGET, key: str = "x1", **kw: Any) -> ContextEvent:
    return make_event(
        RecordKind.RECORD_RETRACTED, key, payload=RetractionPayload(target, "undo"), **kw
    )


def _code(ev: ContextEvent) -> str:
    with pytest.raises(InvalidEvent) as info:
        validate_event(ev)
    return info.value.reason_code


# --- validation -----------------------------------------------------------------------


@pytest.mark.spec("R3.3")
@pytest.mark.parametrize("authority", [Authority.HOST, Authority.USER])
def test_the_runtime_or_its_user_may_retract(authority: Authority) -> None:
    validate_event(retraction(authority=authority))


@pytest.mark.spec("R3.3")
@pytest.mark.parametrize(
    "authority", [Authority.MODEL, Authority.TOOL, Authority.SYSTEM, Authority.DEVELOPER]
)
def test_model_or_tool_text_can_never_retract_history(authority: Authority) -> None:
    assert _code(retraction(authority=authority)) == "authority_not_allowed"


@pytest.mark.parametrize(
    "target", ["", "rec_123", "rec_" + "G" * 32, "rec_" + "0" * 33, "x" + TARGET_RECORD_ID[1:]]
)
def test_target_must_be_a_record_id(target: str) -> None:
    assert _code(retraction(target, operation_id=target or "op")) == "bad_retraction_target"


@pytest.mark.spec("R3.1")
def test_operation_is_the_target_so_a_record_is_retracted_once() -> None:
    assert _code(retraction(operation_id="something-else")) == "bad_retraction_target"


def test_a_retraction_belongs_to_a_thread() -> None:
    assert _code(retraction(run=None, instance=None)) == "bad_scope"


# --- planning -------------------------------------------------------------------------


def _state_with(kind: str = "user_input", summarized: bool = False) -> SessionState:
    st = active_state()
    # Written in the retracting thread (run-1, main): in scope (issue 25, finding 6).
    st.retraction_targets[TARGET] = RetractionTarget(kind, summarized, ("run-1", "main"))
    return st


def test_retraction_of_a_known_record_is_recorded_in_its_thread() -> None:
    st = _state_with()
    plan = plan_batch(batch_of(retraction()), {st.session_id: st})
    assert [nr.incoming.event.kind for nr in plan.records] == [RecordKind.RECORD_RETRACTED]
    assert plan.records[0].instance_sequence == 1 and not plan.rejections


@pytest.mark.spec("R3.1")
def test_retracting_twice_is_a_duplicate_even_under_another_key() -> None:
    st = _state_with()
    plan = plan_batch(
        batch_of(retraction(key="x1"), retraction(key="x2")),
        {st.session_id: st},
    )
    assert len(plan.records) == 1 and len(plan.duplicates) == 1


@pytest.mark.parametrize(
    ("kind", "summarized", "code", "dead_letter"),
    [
        (None, False, "retraction_target_unknown", True),
        ("record_retracted", False, "retraction_of_retraction", False),
        ("run_started", False, "retraction_target_not_retractable", False),
        ("resource_activation", False, "retraction_target_not_retractable", False),
        ("user_input", True, "retraction_of_summarized_record", True),
        ("tool_outcome", True, "retraction_of_summarized_record", True),
    ],
)
def test_refused_retractions(
    kind: str | None, summarized: bool, code: str, dead_letter: bool
) -> None:
    st = active_state() if kind is None else _state_with(kind, summarized)
    plan = plan_batch(batch_of(retraction()), {st.session_id: st})
    assert not plan.records
    assert [(r.code, r.dead_letter) for r in plan.rejections] == [(code, dead_letter)]
    # The key stays refused: a redelivery is not planned again (R3.1).
    assert "x1" in st.known_keys


def test_every_retractable_kind_is_accepted() -> None:
    for kind in RETRACTABLE:
        st = _state_with(str(kind))
        plan = plan_batch(batch_of(retraction()), {st.session_id: st})
        assert len(plan.records) == 1, kind


def test_a_record_of_the_same_batch_can_be_retracted() -> None:
    st = active_state()
    user = make_event(RecordKind.SUPPLEMENT, "u1")
    plan = plan_batch(batch_of(user, retraction()), {st.session_id: st})
    assert plan.records[0].record_id == TARGET
    assert len(plan.records) == 2 and not plan.rejections


def test_a_retraction_in_a_batch_cannot_be_retracted_later_in_it() -> None:
    st = _state_with()
    first = retraction(key="x1")
    again = retraction(record_id_for("space-1", "sess-1", "x1"), key="x2")
    plan = plan_batch(batch_of(first, again), {st.session_id: st})
    assert [r.code for r in plan.rejections] == ["retraction_of_retraction"]


def test_a_finished_run_takes_no_retraction() -> None:
    st = _state_with()
    st.runs["run-1"].status = "finished"
    st.active_run_id = None
    plan = plan_batch(batch_of(retraction()), {st.session_id: st})
    assert [r.code for r in plan.rejections] == ["run_not_active"]


# --- rendering ------------------------------------------------------------------------


def _view(seq: int, kind: str, text: str = "", payload: dict[str, Any] | None = None) -> RecordView:
    return RecordView(f"rec-{seq}", seq, "run-1", "main", kind, "host", text, payload or {}, 3)


@pytest.mark.spec("R5.1")
def test_a_retraction_renders_nothing_and_is_no_compaction_candidate() -> None:
    r = ThreadRenderer(lambda s: len(s.split()))
    r.feed(_view(1, "user_input", "hello"), False)
    r.feed(_view(2, "record_retracted", "", {"target_record_id": "rec-9"}), False)
    r.feed(_view(3, "user_input", "again"), False)
    assert [m["content"] for m in r.messages] == ["hello", "again"]
    assert [x.record_id for x in r.records] == ["rec-1", "rec-3"]
    assert r.last_sequence == 3  # seen, so a warm renderer does not read it again


def test_without_the_retraction_kind_the_same_record_would_render() -> None:
    """The check above can fail: the same record under another kind is shown."""
    r = ThreadRenderer(lambda s: len(s.split()))
    rec = dataclasses.replace(_view(2, "record_retracted", "visible"), kind="user_input")
    r.feed(rec, False)
    assert [m["content"] for m in r.messages] == ["visible"]
