"""What the processor adds to ``ctx.observability`` for analytics (SPEC R18, issue 12):
one ``idempotent_hit`` per redelivered record and one ``dead_letter`` per dead letter, by
reason — ids and counts only — published with the batch's other notes."""

from __future__ import annotations

import pytest

from schemas.wire import decode_observability, encode_event
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
