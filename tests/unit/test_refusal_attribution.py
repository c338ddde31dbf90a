"""Issue 38 (items 5 and 6) on the processor's fakes: a refused event is dead-lettered and
counted under its signer's space, never under a session of another space it names; the
message key must be the event's session id (``key_mismatch``); and a refusal of an event
of its own session is that event's recorded outcome, whatever step refused it."""

from __future__ import annotations

import dataclasses

import pytest

from domain.planning.state import SessionState
from domain.rollup import Dims, attributed
from schemas.contracts import Content, RecordKind
from schemas.wire import decode_dead_letter, decode_observability, encode_event
from storage.records.outcomes import RefusedEvent
from streams.processor import RawMessage

from .factories import make_event
from .fakes.publisher import FakePublisher
from .test_processor_orchestration import CONFIG, SESSION, batch, make, open_session, user

pytestmark = pytest.mark.spec("R3.3", "R15.3", "R18")


def letters(pub: FakePublisher) -> list[tuple[str, str | None, str | None, str | None]]:
    """(reason, session, event key, space) of each dead letter published."""
    out = []
    for m in pub.flushed:
        if m.topic == CONFIG.topic_dead_letter:
            d = decode_dead_letter(m.value)
            out.append((d.reason_code, d.session_id, d.event_key, d.space_id))
    return out


def notes(pub: FakePublisher) -> list[tuple[str, str, str | None]]:
    """(reason, session, space) of each dead-letter note on the observability topic."""
    out = []
    for m in pub.flushed:
        if m.topic == CONFIG.topic_observability:
            ev = decode_observability(m.value)
            if ev.kind == "dead_letter":
                out.append((ev.reason or "", ev.session_id, ev.space_id))
    return out


def other_space_session() -> SessionState:
    """Tenant A's session; the tests' runtime signs as space-1 (tenant B)."""
    return dataclasses.replace(open_session(), session_id="sess-a", space_id="space-a")


async def test_a_claim_on_another_spaces_session_counts_in_the_signers_space() -> None:
    proc, store = make()
    store.add_session(other_space_session())
    # B's own space in the scope (its key may write it), A's session id.
    forged = make_event(RecordKind.USER_INPUT, "forged", session="sess-a")
    result = await proc.handle(batch(encode_event(forged), session="sess-a"))
    assert result.dead_letters == 1
    pub = proc.publisher
    assert isinstance(pub, FakePublisher)
    # Never under A's session: the letter and its note name B's space only.
    assert letters(pub) == [("scope_mismatch", None, "forged", "space-1")]
    assert notes(pub) == [("scope_mismatch", "", "space-1")]
    assert store.data.outcomes == {}  # nothing recorded against A's key


async def test_a_claim_refused_at_admission_names_no_session_of_another_space() -> None:
    proc, store = make()
    store.add_session(other_space_session())
    ref = Content.reference("f" * 64, 10, "text/plain")
    claim = make_event(RecordKind.USER_INPUT, "big", session="sess-a", content=ref)
    result = await proc.handle(batch(encode_event(claim), session="sess-a"))
    assert result.dead_letters == 1
    pub = proc.publisher
    assert isinstance(pub, FakePublisher)
    assert letters(pub) == [("blob_missing", None, "big", "space-1")]
    assert store.data.outcomes == {}


async def test_a_message_keyed_otherwise_than_its_session_is_refused() -> None:
    proc, store = make()
    msgs = batch(encode_event(user("elsewhere")), session="sess-other")
    result = await proc.handle(msgs)
    assert (result.committed, result.dead_letters) == (0, 1)
    pub = proc.publisher
    assert isinstance(pub, FakePublisher)
    assert letters(pub) == [("key_mismatch", SESSION, "elsewhere", "space-1")]
    # The session is the signer's own: the refusal is the event's outcome ...
    assert store.data.outcomes == {(SESSION, "elsewhere"): "key_mismatch"}
    # ... and the key stays refused, even sent again on the right key.
    again = await proc.handle(batch(encode_event(user("elsewhere"))))
    assert (again.committed, again.duplicates) == (0, 1)


async def test_a_refusal_at_admission_is_the_events_outcome() -> None:
    proc, store = make()
    missing = dataclasses.replace(
        user("big"), content=Content.reference("f" * 64, 10, "text/plain")
    )
    result = await proc.handle(batch(encode_event(missing), encode_event(user("fine"))))
    assert (result.committed, result.dead_letters) == (1, 1)
    assert store.data.outcomes == {(SESSION, "big"): "blob_missing"}
    pub = proc.publisher
    assert isinstance(pub, FakePublisher)
    assert letters(pub) == [("blob_missing", SESSION, "big", "space-1")]


async def test_an_unsigned_message_is_attributed_to_nobody() -> None:
    proc, store = make()
    value = encode_event(user("unsigned"))
    result = await proc.handle([RawMessage(SESSION.encode(), value, 0, 0, None)])
    assert result.dead_letters == 1
    pub = proc.publisher
    assert isinstance(pub, FakePublisher)
    assert letters(pub) == [("unauthenticated_event", None, None, None)]
    assert store.data.outcomes == {}


async def test_an_authentication_refusal_binds_nothing_and_gives_way() -> None:
    """Recorded so that its runtime learns of it, it never blocks the genuine writer's
    event of that key, and a later refusal of the key replaces it."""
    proc, store = make()
    unauth = RefusedEvent(SESSION, "k", "unauthenticated_event", "x", "space-1", "actor-1")
    await store.record_refusals([unauth, dataclasses.replace(unauth, event_key="j")])
    result = await proc.handle(batch(encode_event(user("k"))))
    assert result.committed == 1
    await store.record_refusals([dataclasses.replace(unauth, event_key="j", code="blob_missing")])
    assert store.data.outcomes[(SESSION, "j")] == "blob_missing"


def test_a_fact_counts_in_its_sessions_space_or_else_its_signers_alone() -> None:
    a = Dims("space-a", "agent-a", "rel-a", "model-a")
    assert attributed(a, None, "action") == dataclasses.replace(a, purpose="action")
    assert attributed(a, "space-a") == a
    assert attributed(a, "space-b") == Dims("space-b")
    assert attributed(Dims(), "space-b") == Dims("space-b")


@pytest.mark.spec("R3.1", "R15.3")
async def test_a_refused_message_redelivered_publishes_its_lost_dead_letter_again() -> None:
    """A refused event's letter is published after its refusal commits: a processor that
    dies between the two leaves the refusal and no letter. That very message redelivered
    (its partition and offset) publishes the letter again, the refusal written once; the
    same key in a later message stays a silent duplicate."""
    proc, store = make()
    stray = encode_event(make_event(RecordKind.USER_INPUT, "stray", run="run-9"))
    assert (await proc.handle(batch(encode_event(user("a")), stray))).dead_letters == 1
    pub = proc.publisher
    assert isinstance(pub, FakePublisher)
    sent = [decode_dead_letter(m.value) for m in pub.flushed if m.topic == CONFIG.topic_dead_letter]
    pub.flushed.clear()  # lost with the processor that committed the refusal
    again = await proc.handle(batch(encode_event(user("a")), stray))
    assert (again.committed, again.duplicates, again.dead_letters) == (0, 2, 1)
    (letter,) = [
        decode_dead_letter(m.value) for m in pub.flushed if m.topic == CONFIG.topic_dead_letter
    ]
    assert dataclasses.replace(letter, failed_at_ms=0) == dataclasses.replace(
        sent[0], failed_at_ms=0
    )
    assert (letter.reason_code, letter.source_offset, letter.value) == ("unknown_run", 1, stray)
    assert store.data.outcomes == {(SESSION, "stray"): "unknown_run"}
    pub.flushed.clear()
    later = await proc.handle(batch(stray))  # the same key, another message (offset 0)
    assert (later.duplicates, later.dead_letters, letters(pub)) == (1, 0, [])
