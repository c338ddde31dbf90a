"""domain/planning/ ``plan_batch``: dedupe, sequences, runs, counters (pure)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.planning.batch import plan_batch
from domain.planning.lifecycle import accepts_appends, lifecycle_key
from domain.planning.state import BatchPlan, Incoming, RunState, SessionState, record_id_for
from schemas.contracts import (
    AssistantMessagePayload,
    ContextEvent,
    RecordKind,
    ResourceActivationPayload,
    ToolOutcomePayload,
    ToolStatus,
)

from .factories import make_event

SESSION = "sess-1"


def inc(ev: ContextEvent, offset: int = 0, tokens: int = 3) -> Incoming:
    return Incoming(ev, 0, offset, tokens, "tiktoken:cl100k_base")


def batch_of(*events: ContextEvent) -> list[Incoming]:
    return [inc(ev, i) for i, ev in enumerate(events)]


def new_state(**kw: Any) -> SessionState:
    values: dict[str, Any] = {
        "session_id": SESSION,
        "space_id": "space-1",
        "actor_id": "actor-1",
        "policy_revision": "pol-1",
        "next_session_sequence": 1,
        "active_run_id": None,
        "revision": 0,
        "user_turns": 0,
        "model_steps": 0,
    }
    values.update(kw)
    return SessionState(**values)


def active_state(run: str = "run-1", **kw: Any) -> SessionState:
    """A session whose run ``run`` (main instance ``main``) is active."""
    return new_state(active_run_id=run, runs={run: RunState(run, "main", "active")}, **kw)


def started(run: str = "run-1", key: str | None = None) -> ContextEvent:
    return make_event(RecordKind.RUN_STARTED, key or f"start:{run}", run=run)


def assistant(
    key: str, purpose: str = "action", instance: str = "main", run: str = "run-1", op: str = ""
) -> ContextEvent:
    return make_event(
        RecordKind.ASSISTANT_MESSAGE,
        key,
        run=run,
        instance=instance,
        payload=AssistantMessagePayload(op or f"op-{key}", purpose),
        operation_id=op or f"op-{key}",
    )


def counters(st_: SessionState) -> tuple[int, int, int, int, str | None]:
    return (
        st_.user_turns,
        st_.model_steps,
        st_.next_session_sequence,
        st_.revision,
        st_.active_run_id,
    )


def plan(events: list[Incoming], state: SessionState) -> BatchPlan:
    return plan_batch(events, {state.session_id: state})


# --- sequences ------------------------------------------------------------------------


@pytest.mark.spec("R3.2")
def test_sequences_are_gapless_and_ordered() -> None:
    s = new_state(next_session_sequence=41, revision=9)
    events = batch_of(
        started(),
        make_event(RecordKind.USER_INPUT, "u1"),
        assistant("m1"),
        make_event(RecordKind.TOOL_OUTCOME, "t1", operation_id="tool:call-1"),
        make_event(RecordKind.USER_INPUT, "c1", instance="child-1"),
        make_event(RecordKind.RUN_FINISHED, "fin"),
    )
    p = plan(events, s)
    assert [r.incoming.event.event_key for r in p.records] == [
        "start:run-1",
        "u1",
        "m1",
        "t1",
        "c1",
        "fin",
    ]
    assert [r.session_sequence for r in p.records] == [41, 42, 43, 44, 45, 46]
    assert [r.instance_sequence for r in p.records] == [1, 2, 3, 4, 1, 5]
    assert s.next_session_sequence == 47
    assert s.revision == 15
    assert s.threads == {("run-1", "main"): 6, ("run-1", "child-1"): 2}
    assert p.new_threads == {(SESSION, "run-1", "main"), (SESSION, "run-1", "child-1")}
    assert p.touched_sessions == {SESSION}
    assert p.duplicates == [] and p.rejections == []


def test_record_id_is_deterministic_per_scope_and_key() -> None:
    s = new_state()
    p = plan(batch_of(started()), s)
    assert p.records[0].record_id == record_id_for("space-1", SESSION, "start:run-1")
    assert record_id_for("space-1", SESSION, "k") == record_id_for("space-1", SESSION, "k")
    assert record_id_for("space-1", SESSION, "k") != record_id_for("space-2", SESSION, "k")
    assert p.records[0].record_id.startswith("rec_") and len(p.records[0].record_id) == 36


def test_existing_thread_continues_its_instance_sequence() -> None:
    s = active_state(next_session_sequence=8, threads={("run-1", "main"): 5})
    p = plan(batch_of(make_event(RecordKind.USER_INPUT, "u9")), s)
    assert p.records[0].instance_sequence == 5
    assert p.records[0].session_sequence == 8
    assert p.new_threads == set()


# --- duplicates -----------------------------------------------------------------------


@pytest.mark.spec("R3.1", "R8.1", "R8.2")
def test_known_key_is_a_duplicate() -> None:
    s = active_state(next_session_sequence=5, user_turns=2, model_steps=3, revision=4)
    s.known_keys.add("m1")
    before = counters(s)
    ev = inc(assistant("m1"))
    p = plan([ev], s)
    assert p.records == [] and p.duplicates == [ev] and p.rejections == []
    assert counters(s) == before


@pytest.mark.spec("R3.1", "R8.1", "R8.2")
def test_repeat_within_batch_is_a_duplicate() -> None:
    s = new_state()
    first, again = inc(started(), 0), inc(started(), 1)
    m1, m1_again = inc(assistant("m1"), 2), inc(assistant("m1"), 3)
    p = plan([first, again, m1, m1_again], s)
    assert [r.incoming for r in p.records] == [first, m1]
    assert p.duplicates == [again, m1_again]
    assert (s.user_turns, s.model_steps) == (1, 1)
    assert len(p.new_runs) == 1


@pytest.mark.spec("R3.1", "R8.1", "R8.2")
def test_same_operation_and_kind_is_a_duplicate() -> None:
    s = active_state()
    a = inc(assistant("model:op-7", op="op-7"), 0)
    b = inc(assistant("model:op-7-retry", op="op-7"), 1)  # other key, same operation
    p = plan([a, b], s)
    assert [r.incoming for r in p.records] == [a]
    assert p.duplicates == [b]
    assert s.model_steps == 1


@pytest.mark.spec("R3.1")
def test_known_operation_is_a_duplicate() -> None:
    s = active_state()
    s.known_operations.add(("tool:call-1", "tool_outcome"))
    ev = inc(make_event(RecordKind.TOOL_OUTCOME, "t-new", operation_id="tool:call-1"))
    p = plan([ev], s)
    assert p.records == [] and p.duplicates == [ev]


@pytest.mark.spec("R3.1")
def test_same_operation_different_kind_is_not_a_duplicate() -> None:
    s = active_state()
    a = inc(assistant("m", op="op-1"), 0)
    b = inc(make_event(RecordKind.TOOL_OUTCOME, "t", operation_id="op-1"), 1)
    p = plan([a, b], s)
    assert len(p.records) == 2 and p.duplicates == []


# --- runs and counters ------------------------------------------------------------------


@pytest.mark.spec("R2.1", "R8.1")
def test_run_started_counts_a_user_turn_and_fixes_the_snapshot_boundary() -> None:
    s = new_state(next_session_sequence=11, user_turns=4, model_steps=9, revision=10)
    p = plan(batch_of(started("run-2")), s)
    assert s.user_turns == 5 and s.model_steps == 9
    assert s.active_run_id == "run-2"
    assert s.runs["run-2"] == RunState("run-2", "main", "active")
    assert len(p.new_runs) == 1
    nr = p.new_runs[0]
    assert nr.run_id == "run-2" and nr.session_id == SESSION and nr.main_instance_id == "main"
    assert nr.through_session_sequence == 10  # the last record before run_started
    assert nr.started_sequence == 11 == p.records[0].session_sequence
    assert (nr.user_turns, nr.model_steps, nr.policy_revision) == (5, 9, "pol-1")


@pytest.mark.spec("R2.1", "R8.1")
def test_snapshot_boundary_within_one_batch() -> None:
    s = new_state(next_session_sequence=1)
    p = plan(
        batch_of(
            started("run-a"),
            make_event(RecordKind.USER_INPUT, "ua", run="run-a"),
            assistant("ma", run="run-a"),
            make_event(RecordKind.RUN_FINISHED, "fa", run="run-a"),
            started("run-b"),
        ),
        s,
    )
    assert [(n.run_id, n.through_session_sequence, n.started_sequence) for n in p.new_runs] == [
        ("run-a", 0, 1),
        ("run-b", 4, 5),
    ]
    assert [n.user_turns for n in p.new_runs] == [1, 2]
    assert [n.model_steps for n in p.new_runs] == [0, 1]  # inherited, never reset (R2.6)


@pytest.mark.spec("R1.3")
def test_second_run_while_active_is_refused_not_dead_lettered() -> None:
    s = active_state("run-1", next_session_sequence=7, user_turns=1, revision=6)
    before = counters(s)
    ev = inc(started("run-2"))
    p = plan([ev], s)
    assert p.records == [] and p.new_runs == []
    assert len(p.rejections) == 1
    rej = p.rejections[0]
    assert rej.code == "run_active" and rej.dead_letter is False and rej.incoming is ev
    assert "run-1" in rej.message
    assert counters(s) == before
    assert "run-2" not in s.runs


@pytest.mark.spec("R1.3", "R3.1")
def test_refused_event_stays_refused_on_redelivery() -> None:
    s = active_state("run-1")
    p1 = plan([inc(started("run-2"))], s)
    assert [r.code for r in p1.rejections] == ["run_active"]
    plan([inc(make_event(RecordKind.RUN_FINISHED, "fin"))], s)
    assert s.active_run_id is None
    p2 = plan([inc(started("run-2"))], s)  # redelivered after run-1 finished
    assert p2.records == [] and p2.new_runs == []
    assert s.user_turns == 0


def test_run_started_twice_with_new_key_is_run_exists() -> None:
    s = new_state()
    p = plan(batch_of(started("run-1"), started("run-1", key="start-again")), s)
    assert len(p.records) == 1
    assert [(r.code, r.dead_letter) for r in p.rejections] == [("run_exists", True)]
    assert s.user_turns == 1


@pytest.mark.spec("R1.2", "R8.1")
def test_run_resumed_does_not_add_a_user_turn() -> None:
    s = new_state(
        next_session_sequence=20,
        user_turns=3,
        model_steps=2,
        runs={"run-1": RunState("run-1", "main", "finished")},
    )
    p = plan(batch_of(make_event(RecordKind.RUN_RESUMED, "resume-1")), s)
    assert len(p.records) == 1 and p.new_runs == []
    assert (s.user_turns, s.model_steps) == (3, 2)
    assert s.active_run_id == "run-1" and s.runs["run-1"].status == "active"
    assert [(c.run_id, c.status) for c in p.run_changes] == [("run-1", "active")]


@pytest.mark.spec("R1.3")
def test_resume_while_another_run_is_active_is_refused() -> None:
    s = active_state("run-2")
    s.runs["run-1"] = RunState("run-1", "main", "finished")
    p = plan(batch_of(make_event(RecordKind.RUN_RESUMED, "resume-1", run="run-1")), s)
    assert [(r.code, r.dead_letter) for r in p.rejections] == [("run_active", False)]
    assert s.active_run_id == "run-2" and s.runs["run-1"].status == "finished"


@pytest.mark.spec("R8.1")
def test_supplement_does_not_add_a_user_turn() -> None:
    s = active_state(user_turns=1)
    p = plan(batch_of(make_event(RecordKind.SUPPLEMENT, "sup-1")), s)
    assert len(p.records) == 1 and s.user_turns == 1


@pytest.mark.parametrize(
    ("kind", "status"),
    [(RecordKind.RUN_FINISHED, "finished"), (RecordKind.RUN_CANCELLED, "cancelled")],
)
def test_run_end_clears_the_active_run(kind: RecordKind, status: str) -> None:
    s = active_state()
    p = plan(batch_of(make_event(kind, "end"), make_event(kind, "end-again")), s)
    assert s.active_run_id is None and s.runs["run-1"].status == status
    assert [(c.run_id, c.status) for c in p.run_changes] == [("run-1", status)]
    assert [(r.code, r.dead_letter) for r in p.rejections] == [("run_not_active", False)]
    assert len(p.records) == 1


@pytest.mark.spec("R8.2")
def test_action_response_of_main_instance_counts_a_step() -> None:
    s = active_state(model_steps=5)
    plan(batch_of(assistant("m1"), assistant("m2")), s)
    assert s.model_steps == 7


@pytest.mark.spec("R8.2")
@pytest.mark.parametrize("purpose", ["compaction", "completion", "verification"])
def test_non_action_purposes_do_not_count(purpose: str) -> None:
    s = active_state(model_steps=5)
    p = plan(batch_of(assistant("m1", purpose=purpose)), s)
    assert len(p.records) == 1 and s.model_steps == 5


@pytest.mark.spec("R8.2", "R8.3")
def test_child_instance_steps_do_not_count_for_the_session() -> None:
    s = active_state(model_steps=5)
    p = plan(
        batch_of(
            assistant("c1", instance="child-1"),
            assistant("c2", instance="child-1"),
            make_event(RecordKind.CHILD_RESULT, "child:op", operation_id="child:op"),
        ),
        s,
    )
    assert len(p.records) == 3 and s.model_steps == 5


@pytest.mark.spec("R8.2")
def test_tool_results_and_other_kinds_do_not_count_steps() -> None:
    s = active_state(model_steps=0, user_turns=1)
    plan(
        batch_of(
            make_event(RecordKind.USER_INPUT, "u"),
            make_event(
                RecordKind.TOOL_OUTCOME,
                "t",
                payload=ToolOutcomePayload("c", "n", ToolStatus.ERROR),
            ),
            make_event(RecordKind.SUPPLEMENT, "s"),
        ),
        s,
    )
    assert (s.model_steps, s.user_turns) == (0, 1)


# --- rejections -------------------------------------------------------------------------


def test_unknown_session_is_dead_lettered() -> None:
    s = active_state()
    ev = inc(make_event(RecordKind.USER_INPUT, "u", session="sess-other"))
    p = plan([ev], s)
    assert [(r.code, r.dead_letter, r.incoming) for r in p.rejections] == [
        ("unknown_session", True, ev)
    ]
    assert p.records == [] and p.touched_sessions == set()


def test_unknown_run_is_dead_lettered() -> None:
    s = active_state("run-1", next_session_sequence=3)
    before = counters(s)
    p = plan(batch_of(make_event(RecordKind.USER_INPUT, "u", run="run-x")), s)
    assert [(r.code, r.dead_letter) for r in p.rejections] == [("unknown_run", True)]
    assert p.records == [] and counters(s) == before
    assert ("run-x", "main") not in s.threads


def test_scope_mismatch_is_dead_lettered() -> None:
    s = active_state()
    p = plan(batch_of(make_event(RecordKind.USER_INPUT, "u", actor="intruder")), s)
    assert [(r.code, r.dead_letter) for r in p.rejections] == [("scope_mismatch", True)]
    p = plan(batch_of(make_event(RecordKind.USER_INPUT, "u2", space="space-x")), s)
    assert [(r.code, r.dead_letter) for r in p.rejections] == [("scope_mismatch", True)]


def test_session_scoped_resource_activation_is_accepted() -> None:
    s = new_state()
    ev = make_event(RecordKind.RESOURCE_ACTIVATION, "act-1", run=None, instance=None)
    p = plan(batch_of(ev), s)
    assert p.rejections == []
    assert len(p.records) == 1 and p.records[0].instance_sequence is None


# --- serial runs: only the active run takes appends (R1.2, R1.3, R8.2) -------------------

_APPENDS = (
    RecordKind.USER_INPUT,
    RecordKind.SUPPLEMENT,
    RecordKind.ASSISTANT_MESSAGE,
    RecordKind.TOOL_CALL,
    RecordKind.TOOL_OUTCOME,
    RecordKind.CHILD_RESULT,
    RecordKind.RESOURCE_ACTIVATION,  # an activation (or a child transfer) into the thread
)
_LIFECYCLE = (
    RecordKind.RUN_STARTED,
    RecordKind.RUN_RESUMED,
    RecordKind.RUN_FINISHED,
    RecordKind.RUN_CANCELLED,
)


def ended_state(status: str = "finished", **kw: Any) -> SessionState:
    """run-1 ended (``status``), no run active."""
    return new_state(runs={"run-1": RunState("run-1", "main", status, ends=1)}, **kw)


@pytest.mark.spec("R1.3", "R8.2")
@pytest.mark.parametrize("kind", _APPENDS)
@pytest.mark.parametrize("instance", ["main", "child-1"])
def test_an_append_to_a_finished_run_is_dead_lettered_and_not_counted(
    kind: RecordKind, instance: str
) -> None:
    s = ended_state(next_session_sequence=9, user_turns=1, model_steps=4, revision=8)
    before = counters(s)
    ev = inc(make_event(kind, "late", instance=instance, operation_id="op-late"))
    p = plan([ev], s)
    assert [(r.code, r.dead_letter, r.incoming) for r in p.rejections] == [
        ("run_not_active", True, ev)
    ]
    assert "run-1 is finished" in p.rejections[0].message
    assert p.records == [] and p.new_threads == set() and p.touched_sessions == set()
    assert counters(s) == before and s.threads == {}


@pytest.mark.spec("R1.3", "R8.2")
def test_an_action_response_to_a_cancelled_run_while_another_runs_is_refused() -> None:
    s = active_state("run-2", model_steps=3)
    s.runs["run-1"] = RunState("run-1", "main", "cancelled", ends=1)
    p = plan(batch_of(assistant("stale", run="run-1"), assistant("live", run="run-2")), s)
    assert [r.incoming.event.event_key for r in p.records] == ["live"]
    assert [(r.code, r.dead_letter) for r in p.rejections] == [("run_not_active", True)]
    assert s.model_steps == 4  # only run-2's step (R8.2)
    assert s.active_run_id == "run-2" and s.runs["run-1"].status == "cancelled"


@pytest.mark.spec("R1.2", "R3.1")
def test_a_refused_append_stays_refused_after_the_run_is_resumed() -> None:
    s = ended_state()
    first = plan(batch_of(make_event(RecordKind.USER_INPUT, "late")), s)
    assert [r.code for r in first.rejections] == ["run_not_active"]
    p = plan(
        batch_of(
            make_event(RecordKind.RUN_RESUMED, "resume"),
            make_event(RecordKind.USER_INPUT, "late"),  # redelivered: outcome unchanged
            make_event(RecordKind.USER_INPUT, "fresh"),
        ),
        s,
    )
    assert [r.incoming.event.event_key for r in p.records] == ["resume", "fresh"]
    assert [i.event.event_key for i in p.duplicates] == ["late"]


@pytest.mark.spec("R1.2", "R8.2")
def test_a_resumed_run_takes_appends_again_and_counts_its_steps() -> None:
    s = ended_state(model_steps=2)
    p = plan(
        batch_of(
            make_event(RecordKind.RUN_RESUMED, "resume"),
            assistant("m"),
            assistant("c", instance="child-1"),  # a child of the resumed run
            make_event(RecordKind.RUN_FINISHED, "fin"),
            assistant("after-end"),
        ),
        s,
    )
    assert [r.incoming.event.event_key for r in p.records] == ["resume", "m", "c", "fin"]
    assert [(r.incoming.event.event_key, r.code) for r in p.rejections] == [
        ("after-end", "run_not_active")
    ]
    assert s.model_steps == 3


@pytest.mark.spec("R1.3", "R11.8")
def test_a_revocation_through_an_ended_runs_handle_is_never_refused() -> None:
    s = ended_state()
    revoke = ResourceActivationPayload("document", "doc-1", "2", "", active=False)
    activate = ResourceActivationPayload("document", "doc-2", "1", "0" * 64)
    p = plan(
        batch_of(
            make_event(RecordKind.RESOURCE_ACTIVATION, "revoke", payload=revoke),
            make_event(RecordKind.RESOURCE_ACTIVATION, "activate", payload=activate),
        ),
        s,
    )
    assert [r.incoming.event.event_key for r in p.records] == ["revoke"]
    assert [r.code for r in p.rejections] == ["run_not_active"]


@pytest.mark.spec("R1.3")
@pytest.mark.parametrize(
    ("status", "active", "accepted"),
    [
        ("active", "run-1", True),
        ("finished", None, False),
        ("cancelled", None, False),
        ("cancelled", "run-2", False),
        ("active", "run-2", False),  # inconsistent state: strictly refused
    ],
)
def test_accepts_appends_only_for_the_active_run(
    status: str, active: str | None, accepted: bool
) -> None:
    ev = make_event(RecordKind.TOOL_OUTCOME, "t")
    assert accepts_appends(ev, RunState("run-1", "main", status), active) is accepted


@pytest.mark.spec("R1.2")
def test_lifecycle_counters_follow_accepted_and_refused_events() -> None:
    s = active_state("run-2")
    s.runs["run-1"] = RunState("run-1", "main", "finished", ends=1)
    p = plan(batch_of(make_event(RecordKind.RUN_RESUMED, "r-refused")), s)
    assert s.runs["run-1"] == RunState("run-1", "main", "finished", 0, 1, 1)
    assert [(c.run_id, c.status, c.resumes, c.ends, c.refused_resumes) for c in p.run_changes] == [
        ("run-1", "finished", 0, 1, 1)
    ]
    assert p.records == []
    p = plan(
        batch_of(
            make_event(RecordKind.RUN_FINISHED, "f2", run="run-2"),
            make_event(RecordKind.RUN_RESUMED, "r-ok"),
        ),
        s,
    )
    assert s.runs["run-1"] == RunState("run-1", "main", "active", 1, 1, 1)
    assert s.runs["run-2"] == RunState("run-2", "main", "finished", 0, 1, 0)
    assert [(c.run_id, c.status, c.resumes, c.ends) for c in p.run_changes] == [
        ("run-2", "finished", 0, 1),
        ("run-1", "active", 1, 1),
    ]


# --- lifecycle keys: durable, restart-safe, retry-idempotent (R1.2, R3.1) -------------------


@pytest.mark.spec("R1.2", "R3.1")
def test_lifecycle_keys_derive_from_the_runs_counters() -> None:
    run = RunState("run-1", "main", "finished", resumes=2, ends=3)
    assert lifecycle_key(RecordKind.RUN_RESUMED, run) == "run_resumed:run-1:3"
    assert lifecycle_key(RecordKind.RUN_FINISHED, run) == "run_finished:run-1:2"
    assert lifecycle_key(RecordKind.RUN_CANCELLED, run) == "run_cancelled:run-1:2"
    refused = RunState("run-1", "main", "finished", resumes=2, ends=3, refused_resumes=1)
    assert lifecycle_key(RecordKind.RUN_RESUMED, refused) == "run_resumed:run-1:3:1"
    with pytest.raises(ValueError):
        lifecycle_key(RecordKind.USER_INPUT, run)


def _lifecycle(kind: RecordKind, s: SessionState, run: str = "run-1") -> BatchPlan:
    """What Prepare does for a resume/finish without a key: derive it from the state
    (any client, any restart), then let the processor plan it."""
    key = lifecycle_key(kind, s.runs[run])
    return plan([inc(make_event(kind, key, run=run))], s)


@pytest.mark.spec("R1.2", "R3.1")
def test_derived_keys_make_retries_duplicates_and_every_next_transition_new() -> None:
    s = new_state()
    plan(batch_of(started()), s)
    for _ in range(3):  # finish, resume, three times over: every transition is recorded
        for kind in (RecordKind.RUN_FINISHED, RecordKind.RUN_RESUMED):
            first = _lifecycle(kind, s)
            assert len(first.records) == 1 and first.rejections == []
            retry = _lifecycle(kind, s)  # the same request again: same key, a no-op
            assert retry.records == [] and len(retry.duplicates) == 1
    assert s.runs["run-1"] == RunState("run-1", "main", "active", 3, 3, 0)
    assert s.user_turns == 1  # resumes add no user turn (R8.1)


@pytest.mark.spec("R1.2", "R1.3", "R3.1")
def test_a_refused_resume_does_not_poison_the_next_attempt() -> None:
    s = new_state()
    plan(batch_of(started("run-1"), make_event(RecordKind.RUN_FINISHED, "f1")), s)
    plan(batch_of(started("run-2")), s)
    refused = _lifecycle(RecordKind.RUN_RESUMED, s)
    assert [r.code for r in refused.rejections] == ["run_active"]
    assert [r.code for r in _lifecycle(RecordKind.RUN_RESUMED, s).rejections] == ["run_active"]
    _lifecycle(RecordKind.RUN_FINISHED, s, "run-2")
    accepted = _lifecycle(RecordKind.RUN_RESUMED, s)
    assert len(accepted.records) == 1 and s.active_run_id == "run-1"
    assert len(_lifecycle(RecordKind.RUN_RESUMED, s).duplicates) == 1  # retry: no-op


# --- redelivery property ------------------------------------------------------------------

_RUNS = ("run-1", "run-1", "run-1", "run-2")  # weighted: most events hit a started run
_INSTANCES = ("main", "main", "child-1")
_OPS = (None, "op-a", "op-b", "op-c")
_KIND_CHOICES = (
    RecordKind.RUN_STARTED,
    RecordKind.RUN_RESUMED,
    RecordKind.RUN_FINISHED,
    RecordKind.RUN_CANCELLED,
    RecordKind.USER_INPUT,
    RecordKind.SUPPLEMENT,
    RecordKind.ASSISTANT_MESSAGE,
    RecordKind.ASSISTANT_MESSAGE,
    RecordKind.ASSISTANT_MESSAGE,
    RecordKind.TOOL_OUTCOME,
    RecordKind.CHILD_RESULT,
)


@st.composite
def pooled_event(draw: st.DrawFn, index: int) -> ContextEvent:
    kind = draw(st.sampled_from(_KIND_CHOICES))
    run = draw(st.sampled_from(_RUNS))
    lifecycle = kind in (
        RecordKind.RUN_STARTED,
        RecordKind.RUN_RESUMED,
        RecordKind.RUN_FINISHED,
        RecordKind.RUN_CANCELLED,
    )
    instance = "main" if lifecycle else draw(st.sampled_from(_INSTANCES))
    op = None if lifecycle else draw(st.sampled_from(_OPS))
    payload = None
    if kind is RecordKind.ASSISTANT_MESSAGE:
        purpose = draw(st.sampled_from(["action", "action", "compaction", "completion"]))
        payload = AssistantMessagePayload(op or "op", purpose)
    return make_event(
        kind, f"key-{index}", run=run, instance=instance, operation_id=op, payload=payload
    )


@st.composite
def batches(draw: st.DrawFn) -> list[Incoming]:
    size = draw(st.integers(1, 12))
    # Run starts sit in the pool (and usually early in the batch) so that most events
    # land in a known run instead of being dead-lettered as unknown_run.
    pool = [started("run-1"), started("run-2")]
    pool += [draw(pooled_event(i)) for i in range(size)]
    picks = draw(st.lists(st.integers(0, len(pool) - 1), min_size=3, max_size=25))
    if draw(st.booleans()):
        picks = [0, *picks]
    return [inc(pool[i], offset) for offset, i in enumerate(picks)]


def _start_state(next_seq: int, turns: int, steps: int, run_1_active: bool) -> SessionState:
    s = new_state(next_session_sequence=next_seq, user_turns=turns, model_steps=steps)
    if run_1_active:
        s.runs["run-1"] = RunState("run-1", "main", "active")
        s.active_run_id = "run-1"
        s.known_keys.add("start:run-1")
    return s


def _rec_view(p: BatchPlan) -> list[tuple[str, int, int | None, str]]:
    return [
        (r.record_id, r.session_sequence, r.instance_sequence, r.incoming.event.event_key)
        for r in p.records
    ]


@pytest.mark.spec("R3.1", "R3.2", "R8.1", "R8.2")
@settings(max_examples=200, deadline=None)
@given(
    batch=batches(),
    next_seq=st.integers(1, 1000),
    turns=st.integers(0, 50),
    steps=st.integers(0, 50),
    run_1_active=st.booleans(),
)
def test_redelivery_is_a_no_op(
    batch: list[Incoming], next_seq: int, turns: int, steps: int, run_1_active: bool
) -> None:
    s1 = _start_state(next_seq, turns, steps, run_1_active)
    p1 = plan(batch, s1)

    # sequences: gapless from the session's next sequence, gapless per thread from 1
    assert [r.session_sequence for r in p1.records] == list(
        range(next_seq, next_seq + len(p1.records))
    )
    per_thread: dict[tuple[str | None, str | None], list[int | None]] = {}
    for r in p1.records:
        sc = r.incoming.event.scope
        per_thread.setdefault((sc.run_id, sc.instance_id), []).append(r.instance_sequence)
    for seqs in per_thread.values():
        assert seqs == list(range(1, len(seqs) + 1))
    assert s1.next_session_sequence == next_seq + len(p1.records)

    # no key, no (operation, kind) is ever recorded twice
    keys = [r.incoming.event.event_key for r in p1.records]
    assert len(keys) == len(set(keys))
    ops = [
        (r.incoming.event.operation_id, str(r.incoming.event.kind))
        for r in p1.records
        if r.incoming.event.operation_id
    ]
    assert len(ops) == len(set(ops))

    # counters follow the records exactly
    assert s1.user_turns - turns == len(p1.new_runs)
    assert s1.user_turns - turns == sum(
        r.incoming.event.kind is RecordKind.RUN_STARTED for r in p1.records
    )
    main_actions = 0
    for r in p1.records:
        ev = r.incoming.event
        if (
            isinstance(ev.payload, AssistantMessagePayload)
            and ev.payload.purpose == "action"
            and ev.scope.instance_id == s1.runs[ev.scope.run_id or ""].main_instance_id
        ):
            main_actions += 1
    assert s1.model_steps - steps == main_actions
    assert len(p1.records) + len(p1.duplicates) + len(p1.rejections) == len(batch)

    # serial runs: every record that is no lifecycle event lands in the active run
    active = "run-1" if run_1_active else None
    for r in p1.records:
        ev = r.incoming.event
        if ev.kind in (RecordKind.RUN_STARTED, RecordKind.RUN_RESUMED):
            active = ev.scope.run_id
        elif ev.kind in (RecordKind.RUN_FINISHED, RecordKind.RUN_CANCELLED):
            active = None
        else:
            assert ev.scope.run_id == active

    # the same batch again, against the state it left behind: nothing new
    after_first = counters(s1)
    threads_first = dict(s1.threads)
    p_again = plan(copy.copy(batch), s1)
    assert p_again.records == [] and p_again.new_runs == [] and p_again.run_changes == []
    assert counters(s1) == after_first
    assert s1.threads == threads_first

    # batch + batch from the same start equals batch
    s2 = _start_state(next_seq, turns, steps, run_1_active)
    p2 = plan(batch + batch, s2)
    assert _rec_view(p2) == _rec_view(p1)
    assert p2.new_runs == p1.new_runs
    assert p2.run_changes == p1.run_changes
    assert counters(s2) == after_first
