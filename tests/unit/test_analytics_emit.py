"""What the processor and Prepare add to ``ctx.observability`` for analytics (SPEC R18, issue 12):
one ``idempotent_hit`` per redelivered record and one ``dead_letter`` per dead letter, by
reason — ids and counts only — published with the batch's other notes."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from schemas.errors import ContextBudgetExceeded
from schemas.wire import decode_observability, encode_event
from services.prepare.bodies import PrepareIn, ReleaseIn, SessionIn
from services.prepare.bootstrap import Options
from tests.unit.fakes.prepare import PROFILE, PrepareWorld
from tests.unit.fakes.publisher import FakePublisher
from tests.unit.test_processor_orchestration import SESSION, batch, events, make, user

pytestmark = pytest.mark.spec("R18")


def _notes(pub: FakePublisher) -> list[tuple[str, str | None, dict[str, int]]]:
    out = []
    for m in pub.flushed:
        if m.topic == "ctx.observability":
            ev = decode_observability(m.value)
            out.append((ev.kind, ev.reason, ev.counts))
    return out


async def test_a_redelivered_record_is_reported_as_an_idempotent_hit() -> None:
    pub = FakePublisher()
    proc, _ = make(pub)
    msgs = events("a", "b")
    await proc.handle(msgs)
    assert [n for n in _notes(pub) if n[0] == "idempotent_hit"] == []
    await proc.handle(msgs)
    hits = [n for n in _notes(pub) if n[0] == "idempotent_hit"]
    assert hits == [("idempotent_hit", "user_input", {"hits": 1})] * 2


async def test_every_dead_letter_is_reported_by_reason() -> None:
    pub = FakePublisher()
    proc, store = make(pub)
    store.poison_keys = {"c"}
    await proc.handle(batch(b"\x00garbage", encode_event(user("a")), encode_event(user("c"))))
    dead = sorted(n[1] or "" for n in _notes(pub) if n[0] == "dead_letter")
    assert dead == ["apply_failed", "bad_header"]
    # Keyed like the dead letter itself (the original record's key: the session).
    keys = {m.key for m in pub.flushed if m.topic == "ctx.observability"}
    assert keys == {SESSION.encode()}


async def test_a_refused_prepare_is_reported_with_its_reason_not_as_a_prepare() -> None:
    w = PrepareWorld(options=Options(compaction_wait_s=5.0, topic_observability="obs"))
    body = {"release_id": "rel", "agent_id": "a", "instructions": "Answer."}
    await w.svc.releases.register(ReleaseIn.model_validate(body | {"model_profile": PROFILE}), "x")
    await w.svc.runs.open_session(SessionIn(session_id="s1", release_id="rel"), "x", "alice")
    w.run("s1", "r1")
    w.say("s1", "r1", "user_input", "short question")
    sent = await w.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    for i in range(3):  # as history(w, 3, 900) in test_prepare_context_gateway
        w.say("s1", "r1", "user_input", f"q{i} " + "x" * 900)
        w.say("s1", "r1", "assistant_message", f"a{i} " + "y" * 900, purpose="action")
    w.say("s1", "r1", "user_input", "And now?")
    with pytest.raises(ContextBudgetExceeded):
        sent = await w.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    await asyncio.sleep(0)  # the notes are published from tasks
    notes = [decode_observability(m.value) for m in w.publisher.on("obs")]
    assert [(n.kind, n.decision, n.reason) for n in notes] == [
        ("prepare_budget", None, None),
        ("prepare_budget", "refused", "history_over_budget"),
    ]
    # The prepare that was sent counts its decisions by kind (ids and counts only).
    assert notes[0].counts == dict(Counter(d["decision"] for d in sent.decisions))
    assert notes[1].counts == {}


async def test_prepares_notes_go_through_their_own_publisher_when_one_is_given() -> None:
    """Prepare's notes have a producer of their own that lingers (nobody waits for a
    note); the run's events stay on the main one, sent at once."""
    w = PrepareWorld(
        options=Options(compaction_wait_s=5.0, topic_observability="obs"), notes=FakePublisher()
    )
    body = {"release_id": "rel", "agent_id": "a", "instructions": "Answer."}
    await w.svc.releases.register(ReleaseIn.model_validate(body | {"model_profile": PROFILE}), "x")
    await w.svc.runs.open_session(SessionIn(session_id="s1", release_id="rel"), "x", "alice")
    w.run("s1", "r1")
    w.say("s1", "r1", "user_input", "short question")
    await w.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    await asyncio.sleep(0)  # the notes are published from tasks
    assert w.notes is not None
    notes = [decode_observability(m.value) for m in w.notes.on("obs")]
    assert [n.kind for n in notes] == ["prepare_budget"]
    assert w.publisher.on("obs") == []
