"""domain/context/rendering.py ``ThreadRenderer``: message groups, inheritance, ordering."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.context.rendering import (
    RecordView,
    ThreadRenderer,
    skills_catalog_text,
    tool_schema_text,
)


def count(text: str) -> int:
    return len(text.split())


class Stream:
    """Builds RecordViews with increasing session_sequence, as PostgreSQL returns them."""

    def __init__(self, run: str = "run-1", instance: str = "main") -> None:
        self.seq = 0
        self.run = run
        self.instance = instance

    def _rec(self, kind: str, text: str, payload: dict[str, Any], authority: str) -> RecordView:
        self.seq += 1
        return RecordView(
            record_id=f"rec-{self.seq}",
            session_sequence=self.seq,
            run_id=self.run,
            instance_id=self.instance,
            kind=kind,
            authority=authority,
            text=text,
            payload=payload,
            token_count=count(text),
        )

    def user(self, text: str = "a question", supplement: bool = False) -> RecordView:
        kind = "supplement" if supplement else "user_input"
        intent = "supplement" if supplement else "question"
        return self._rec(kind, text, {"intent": intent, "type": "UserInputPayload"}, "user")

    def assistant(self, text: str = "thinking", calls: tuple[str, ...] = ()) -> RecordView:
        payload = {
            "model_operation_id": f"op-{self.seq + 1}",
            "purpose": "action",
            "tool_calls": [
                {"call_id": c, "name": f"tool_{c}", "arguments_json": json.dumps({"id": c})}
                for c in calls
            ],
            "finish_reason": "tool_calls" if calls else "stop",
            "type": "AssistantMessagePayload",
        }
        return self._rec("assistant_message", text, payload, "model")

    def tool_call(self, call_id: str) -> RecordView:
        payload = {
            "call_id": call_id,
            "name": f"tool_{call_id}",
            "arguments_json": json.dumps({"id": call_id}),
            "tool_kind": "function",
            "type": "ToolCallPayload",
        }
        return self._rec("tool_call", "", payload, "host")

    def outcome(self, call_id: str, status: str = "ok", text: str = "") -> RecordView:
        payload = {
            "call_id": call_id,
            "name": f"tool_{call_id}",
            "status": status,
            "type": "ToolOutcomePayload",
        }
        return self._rec("tool_outcome", text or f"result of {call_id}", payload, "tool")

    def child(self, text: str = "child conclusion") -> RecordView:
        return self._rec("child_result", text, {"child_instance_id": "c1"}, "host")

    def resource(self) -> RecordView:
        payload = {"resource_kind": "skill", "resource_id": "pdf", "version": "v2"}
        return self._rec("resource_activation", "", payload, "host")

    def lifecycle(self, kind: str) -> RecordView:
        return self._rec(kind, "", {"reason": None}, "host")


def render(
    inherited: list[RecordView], current: list[RecordView], seal: bool = True
) -> ThreadRenderer:
    r = ThreadRenderer(count, message_overhead=4)
    for rec in inherited:
        r.feed(rec, inherited=True)
    if seal:
        r.seal_inherited()
    for rec in current:
        r.feed(rec, inherited=False)
    return r


def roles(r: ThreadRenderer) -> list[str]:
    return [m["role"] for m in r.messages]


# --- groups ---------------------------------------------------------------------------


@pytest.mark.spec("R5.1")
def test_several_tool_calls_render_as_one_group_in_call_order() -> None:
    s = Stream()
    recs = [
        s.user("compare the files"),
        s.assistant("reading three files", calls=("c1", "c2", "c3")),
        s.outcome("c3", text="third"),  # results arrive out of order
        s.outcome("c1", text="first"),
        s.outcome("c2", text="second"),
    ]
    r = render([], recs)
    assert roles(r) == ["user", "assistant", "tool", "tool", "tool"]
    a = r.messages[1]
    assert [c["id"] for c in a["tool_calls"]] == ["c1", "c2", "c3"]
    assert a["tool_calls"][0] == {"id": "c1", "name": "tool_c1", "arguments": '{"id": "c1"}'}
    assert a["record_ids"] == ["rec-2"] and a["content"] == "reading three files"
    tools = r.messages[2:]
    assert [m["tool_call_id"] for m in tools] == ["c1", "c2", "c3"]
    assert [m["content"] for m in tools] == ["first", "second", "third"]
    assert [m["record_ids"] for m in tools] == [["rec-4"], ["rec-5"], ["rec-3"]]
    assert r.pending_calls() == []


@pytest.mark.spec("R5.1")
def test_group_is_not_rendered_until_complete() -> None:
    s = Stream()
    r = render([], [s.assistant("two calls", calls=("c1", "c2")), s.outcome("c1")])
    assert r.messages == []
    assert r.pending_calls() == ["c2"]
    r.feed(s.outcome("c2"), inherited=False)
    assert roles(r) == ["assistant", "tool", "tool"]
    assert r.pending_calls() == []


@pytest.mark.spec("R5.3")
def test_supplement_arriving_in_an_open_group_follows_the_results() -> None:
    s = Stream()
    recs = [
        s.assistant("calling", calls=("c1", "c2")),
        s.outcome("c1"),
        s.user("also check the totals", supplement=True),
        s.user("and the dates", supplement=True),
        s.outcome("c2"),
    ]
    r = render([], recs)
    assert roles(r) == ["assistant", "tool", "tool", "user", "user"]
    assert [m["content"] for m in r.messages[3:]] == ["also check the totals", "and the dates"]
    assert [m["record_ids"] for m in r.messages[3:]] == [["rec-3"], ["rec-4"]]


@pytest.mark.spec("R2.2")
@pytest.mark.parametrize("status", ["ok", "error", "cancelled", "unknown"])
def test_real_tool_status_is_kept(status: str) -> None:
    s = Stream()
    r = render([], [s.assistant("x", calls=("c1",)), s.outcome("c1", status=status)])
    tool = r.messages[1]
    assert tool["role"] == "tool" and tool["status"] == status
    assert tool["tool_call_id"] == "c1" and tool["name"] == "tool_c1"


@pytest.mark.spec("R2.2")
def test_inherited_error_and_cancelled_results_are_kept() -> None:
    s = Stream(run="run-a")
    inherited = [
        s.user("q1"),
        s.assistant("try", calls=("c1", "c2")),
        s.outcome("c1", status="error", text="timeout"),
        s.outcome("c2", status="cancelled", text="stopped"),
        s.lifecycle("run_cancelled"),
    ]
    r = render(inherited, [])
    assert roles(r) == ["user", "assistant", "tool", "tool", "user"]  # state: R3.3
    assert [m["status"] for m in r.messages[2:4]] == ["error", "cancelled"]
    assert all(m["category"] == "history" for m in r.messages[:4])
    assert "cancelled" in r.messages[4]["content"] and "run-a" in r.messages[4]["content"]


@pytest.mark.spec("R2.4")
def test_inherited_open_group_is_sealed_as_result_unknown() -> None:
    s = Stream(run="run-a")
    inherited = [
        s.user("q1"),
        s.assistant("calling", calls=("c1", "c2")),
        s.outcome("c1", text="got it"),
    ]
    r = render(inherited, [], seal=False)
    assert r.pending_calls() == []  # inherited calls are never pending for this thread
    r.seal_inherited()
    assert roles(r) == ["user", "assistant", "tool", "user"]
    a = r.messages[1]
    assert [c["id"] for c in a["tool_calls"]] == ["c1"]  # the unanswered call is not shown
    state = r.messages[3]
    assert "result unknown" in state["content"] and "c2" in state["content"]
    assert state["block"] == "state" and state["record_ids"] == ["rec-2"]
    assert [m["tool_call_id"] for m in r.messages if m["role"] == "tool"] == ["c1"]
    assert r.pending_calls() == []


@pytest.mark.spec("R2.4")
def test_inherited_group_without_any_result() -> None:
    s = Stream(run="run-a")
    r = render([s.assistant("calling", calls=("c1",))], [])
    assert roles(r) == ["assistant", "user"]
    assert "tool_calls" not in r.messages[0]
    assert "result unknown" in r.messages[1]["content"] and "c1" in r.messages[1]["content"]
    assert '{"id": "c1"}' in r.messages[1]["content"]  # arguments shown, call not re-run


@pytest.mark.spec("R2.4")
def test_run_boundary_closes_an_inherited_group_even_without_seal() -> None:
    s = Stream(run="run-a")
    inherited = [s.assistant("calling", calls=("c1",))]
    cur = Stream(run="run-b")
    cur.seq = s.seq
    r = render(inherited, [cur.user("next question")], seal=False)
    assert roles(r) == ["assistant", "user", "user"]
    assert "result unknown" in r.messages[1]["content"]
    assert r.pending_calls() == []


@pytest.mark.spec("R5.2")
def test_current_thread_open_group_lists_pending_calls() -> None:
    s = Stream()
    r = render([s.user("q")], [s.assistant("calling", calls=("c1", "c2", "c3")), s.outcome("c2")])
    assert r.pending_calls() == ["c1", "c3"]
    assert all(m["role"] != "tool" for m in r.messages)


def test_current_thread_tool_call_record_opens_a_group() -> None:
    s = Stream()
    r = render([], [s.tool_call("h1")])
    assert r.pending_calls() == ["h1"]
    r.feed(s.outcome("h1"), inherited=False)
    assert roles(r) == ["assistant", "tool"]
    assert r.messages[0]["content"] == "" and r.messages[0]["tool_calls"][0]["id"] == "h1"


def test_result_without_its_call_is_state_not_a_tool_message() -> None:
    s = Stream()
    r = render([], [s.outcome("ghost", status="error", text="orphan")])
    assert roles(r) == ["user"]
    assert "ghost" in r.messages[0]["content"] and "orphan" in r.messages[0]["content"]


def test_categories_and_token_accounting() -> None:
    s = Stream(run="run-a")
    inherited = [s.user("old question here"), s.assistant("old answer")]
    cur = [s.user("new question"), s.assistant("go", calls=("c1",)), s.outcome("c1", text="a b")]
    cur += [s.child("x y z"), s.resource()]
    r = render(inherited, cur)
    cats = [m["category"] for m in r.messages]
    assert cats == [
        "history",
        "history",
        "task",
        "interactions",
        "tool_results",
        "material",
        "state",
    ]
    assert r.tokens["history"] == 3 + 2
    assert r.tokens["task"] == 2
    assert r.tokens["tool_results"] == 2
    assert r.tokens["envelope"] == 4 * len(r.messages)
    assert sum(m["tokens"] for m in r.messages) == sum(r.tokens.values())
    assert r.messages[5]["role"] == "user" and "material" in r.messages[5]["content"]


@pytest.mark.spec("R2.4", "R5.1")
def test_deferred_tool_call_keeps_its_result() -> None:
    s = Stream()
    recs = [
        s.assistant("calling", calls=("c1",)),
        s.tool_call("h2"),  # host-issued call while c1 is open: deferred
        s.outcome("h2", text="h2 result"),  # its result, also deferred
        s.outcome("c1", text="c1 result"),  # closes the first group
    ]
    r = render([], recs)
    # h2's result was received: it must be a tool message, and h2 is not pending.
    assert [m.get("tool_call_id") for m in r.messages if m["role"] == "tool"] == ["c1", "h2"]
    assert r.pending_calls() == []


@pytest.mark.spec("R2.2", "R2.4")
def test_deferred_tool_call_is_never_dropped() -> None:
    s = Stream()
    recs = [
        s.assistant("calling", calls=("c1",)),
        s.tool_call("h2"),  # deferred
        s.assistant("next turn", calls=("c3",)),  # closes c1 as unknown, then ...
        s.outcome("c3"),
    ]
    r = render([], recs)
    shown = {rid for m in r.messages for rid in m["record_ids"]}
    assert "rec-2" in shown or r.pending_calls() == ["h2"]


def test_tool_schema_and_skill_catalog_text() -> None:
    cat = [{"name": "b", "parameters": {"y": 1, "x": 2}}, {"name": "a"}]
    assert tool_schema_text(cat) == '[{"name":"b","parameters":{"x":2,"y":1}},{"name":"a"}]'
    text = skills_catalog_text(
        [{"name": "pdf", "version": "3", "description": "PDF tools", "load_entry": "load_pdf"}]
    )
    assert text == "Available skills:\n- pdf (v3): PDF tools — load with load_pdf"
    assert skills_catalog_text([]) == ""


# --- property ---------------------------------------------------------------------------------

_ACTIONS = (
    "user",
    "supplement",
    "assistant",
    "assistant_calls",
    "assistant_calls",
    "outcome",
    "outcome",
    "outcome",
    "stray_outcome",
    "child",
    "resource",
    "cancelled",
    "tool_call",
)
_STATUSES = ("ok", "error", "cancelled", "unknown")


@dataclass
class Scenario:
    inherited: list[RecordView]
    current: list[RecordView]


def build(steps: list[tuple[str, int, str]], split: int, allow_tool_call: bool) -> Scenario:
    s = Stream()
    recs: list[tuple[RecordView, bool]] = []
    outstanding: list[str] = []
    n_calls = 0
    for i, (action, pick, status) in enumerate(steps):
        inherited = i < split
        if i == split:
            outstanding = []  # the current thread never answers an inherited call
        if action == "tool_call" and not allow_tool_call:
            action = "user"
        if action == "user":
            rec = s.user(f"question {i}")
        elif action == "supplement":
            rec = s.user(f"supplement {i}", supplement=True)
        elif action == "assistant":
            rec = s.assistant(f"answer {i}")
        elif action == "assistant_calls":
            calls = tuple(f"c{n_calls + k}" for k in range(1 + pick % 3))
            n_calls += len(calls)
            outstanding.extend(calls)
            rec = s.assistant(f"calling {i}", calls=calls)
        elif action == "tool_call":
            call = f"c{n_calls}"
            n_calls += 1
            outstanding.append(call)
            rec = s.tool_call(call)
        elif action == "outcome":
            if not outstanding:
                continue
            call = outstanding.pop(pick % len(outstanding))
            rec = s.outcome(call, status=status)
        elif action == "stray_outcome":
            rec = s.outcome(f"stray{i}", status=status)
        elif action == "child":
            rec = s.child(f"child {i}")
        elif action == "resource":
            rec = s.resource()
        else:
            rec = s.lifecycle("run_cancelled")
        recs.append((rec, inherited))
    return Scenario([r for r, inh in recs if inh], [r for r, inh in recs if not inh])


def scenarios(allow_tool_call: bool) -> st.SearchStrategy[Scenario]:
    step = st.tuples(st.sampled_from(_ACTIONS), st.integers(0, 30), st.sampled_from(_STATUSES))
    return st.lists(step, max_size=30).flatmap(
        lambda steps: st.integers(0, len(steps)).map(
            lambda split: build(steps, split, allow_tool_call)
        )
    )


def check_structure(sc: Scenario, r: ThreadRenderer, ordered: bool = False) -> None:
    by_id = {rec.record_id: rec for rec in sc.inherited + sc.current}
    msgs = r.messages
    answered_ids: set[str] = set()
    for i, m in enumerate(msgs):
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            following = msgs[i + 1 : i + 1 + len(ids)]
            # every call is immediately followed by its result, in call order
            assert [f["role"] for f in following] == ["tool"] * len(ids)
            assert [f["tool_call_id"] for f in following] == ids
        if m["role"] == "tool":
            j = i - 1
            while j >= 0 and msgs[j]["role"] == "tool":
                j -= 1
            assert j >= 0 and msgs[j]["role"] == "assistant"
            assert m["tool_call_id"] in [c["id"] for c in msgs[j].get("tool_calls", [])]
            # a tool message is exactly one real result record of that call
            (rid,) = m["record_ids"]
            src = by_id[rid]
            assert src.kind == "tool_outcome"
            assert src.payload["call_id"] == m["tool_call_id"]
            assert m["status"] == src.payload["status"] and m["content"] == src.text
            answered_ids.add(m["tool_call_id"])
    # a call whose result is unknown never gets a tool message
    for m in msgs:
        if m["block"] == "state" and "result unknown" in m["content"]:
            call_id = m["content"].split("tool call ", 1)[1].split(" ", 1)[0]
            assert call_id not in answered_ids
    # no record rendered twice in the same role (result-unknown notes: one per call)
    seen: set[tuple[str, str, str]] = set()
    for m in msgs:
        for rid in m["record_ids"]:
            assert rid in by_id
            extra = m["content"] if m["block"] == "state" else ""
            key = (m["role"], rid, extra)
            assert key not in seen
            seen.add(key)
    # user messages keep receive order
    user_seq = [
        by_id[m["record_ids"][0]].session_sequence
        for m in msgs
        if m["role"] == "user" and m["block"] != "state"
    ]
    assert user_seq == sorted(user_seq)
    if ordered:
        # Every non-tool message is anchored at its source record: a record received
        # while a group was open comes after that whole group (R5.3), never before it.
        anchors = [by_id[m["record_ids"][0]].session_sequence for m in msgs if m["role"] != "tool"]
        assert anchors == sorted(anchors)
    assert sum(m["tokens"] for m in msgs) == sum(r.tokens.values())
    assert r.record_count == len(sc.inherited) + len(sc.current)


@pytest.mark.spec("R4.3", "R5.1", "R5.3", "R2.4")
@settings(max_examples=200, deadline=None)
@given(sc=scenarios(allow_tool_call=True))
def test_rendering_invariants(sc: Scenario) -> None:
    r = render(sc.inherited, sc.current)
    check_structure(sc, r)
    again = render(sc.inherited, sc.current)
    assert again.messages == r.messages
    assert again.tokens == r.tokens
    assert again.pending_calls() == r.pending_calls()


@pytest.mark.spec("R2.2", "R2.3", "R5.1")
@settings(max_examples=200, deadline=None)
@given(sc=scenarios(allow_tool_call=False))
def test_every_visible_record_is_rendered_once_the_thread_moves_on(sc: Scenario) -> None:
    r = render(sc.inherited, sc.current)
    pending = set(r.pending_calls())
    # The model answers: a new assistant message closes any open group of this thread.
    s = Stream()
    s.seq = 10_000
    final = s.assistant("final answer")
    r.feed(final, inherited=False)
    check_structure(Scenario(sc.inherited, [*sc.current, final]), r, ordered=True)
    assert r.pending_calls() == []
    shown = {rid for m in r.messages for rid in m["record_ids"]}
    invisible = {"run_cancelled"}
    for rec in sc.current:
        if rec.kind not in invisible:
            assert rec.record_id in shown, rec
    for rec in sc.inherited:
        assert rec.record_id in shown, rec  # inherited run_cancelled is shown as state
    for call in pending:
        assert any(
            m["block"] == "state" and f"tool call {call} " in m["content"] for m in r.messages
        )


@pytest.mark.spec("R2.3")
def test_feeding_a_record_twice_renders_it_once() -> None:
    from domain.context.rendering import RecordView, ThreadRenderer

    r = ThreadRenderer(lambda t: len(t.split()))
    rec = RecordView("r1", 5, "run", "main", "user_input", "user", "hello there", {}, 2)
    r.feed(rec, inherited=False)
    r.feed(rec, inherited=False)  # e.g. two prepares racing on one cached view
    assert [m["record_ids"] for m in r.messages] == [["r1"]]
    assert r.record_count == 1
