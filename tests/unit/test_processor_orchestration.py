"""The session processor's orchestration on fakes (issue 11): decode → transact →
publish, with the in-memory ``FakeProcessingStore`` and ``FakePublisher`` — no Kafka, no
PostgreSQL. (The real-stack tests in tests/integration stay; these pin the order and the
failure handling of ``BatchProcessor.handle`` itself.)"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from domain.auth import host_key
from domain.compaction.control.effects import LockedState, ObservationInputs
from domain.compaction.triggers import Counters
from domain.context.envelope import BusKey, KeySigner, ServiceSigner, VerifyKeys
from domain.context.tokens import ByteEstimateCounter, CachedCounter
from domain.planning.state import RunState, SessionState
from domain.policy.context_policy import validate_compaction
from schemas import codec
from schemas.contracts import ContextEvent, RecordKind
from schemas.wire import (
    BudgetObservation,
    ControlEvent,
    decode_committed,
    decode_compaction_request,
    decode_dead_letter,
    encode_control,
    encode_event,
)
from streams.admission import CONTROL_EVENT_NAME
from streams.envelopes import Authenticator
from streams.outgoing import ProcessorConfig
from streams.processor import BatchProcessor, RawMessage

from .factories import make_event
from .fakes.processor import FakeProcessing, FakeProcessingStore
from .fakes.publisher import FakePublisher

CONFIG = ProcessorConfig("proc-test", "ctx.records", "ctx.committed", "ctx.dead")
SESSION = "sess-1"
# The runtime's host key of space-1: every message of these tests is signed with it.
ISSUER = b"i" * 32  # the key issuer secret
RUNTIME_KEY = host_key("0" * 16, ISSUER).key
RUNTIME = KeySigner.of("0" * 16, RUNTIME_KEY)


class FakeBusKeys:
    async def bus_keys(self, key_ids: Sequence[str]) -> dict[str, BusKey]:
        live = {"0" * 16: BusKey("space-1", "host")}
        return {k: live[k] for k in key_ids if k in live}


SERVICES = {n: ServiceSigner(n, n.encode() * 8) for n in ("prepare", "compaction")}
VERIFY = VerifyKeys({n: (s.secret,) for n, s in SERVICES.items()}, (ISSUER,))
AUTH = Authenticator(FakeBusKeys(), lambda: VERIFY)


class LoggingPublisher(FakePublisher):
    """A FakePublisher that writes its sends and flushes into the store's log."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    async def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        await super().send(topic, key, value)
        self.log.append(f"send {topic}")

    async def flush(self) -> None:
        await super().flush()
        self.log.append("flush")


def open_session() -> SessionState:
    return SessionState(
        SESSION,
        "space-1",
        "actor-1",
        "pol-1",
        next_session_sequence=1,
        active_run_id="run-1",
        revision=0,
        user_turns=0,
        model_steps=0,
        runs={"run-1": RunState("run-1", "main", "active")},
    )


def make(publisher: FakePublisher | None = None) -> tuple[BatchProcessor, FakeProcessingStore]:
    stores = FakeProcessing()
    stores.store.add_session(open_session())
    pub = publisher if publisher is not None else LoggingPublisher(stores.store.log)
    counter = CachedCounter(ByteEstimateCounter())
    return BatchProcessor(stores, pub, counter, CONFIG, AUTH), stores.store


def user(key: str) -> ContextEvent:
    return make_event(RecordKind.USER_INPUT, key, text=f"question {key}")


def batch(*values: bytes | None, session: str = SESSION) -> list[RawMessage]:
    """Messages as the space's runtime signs them (domain.context.envelope), keyed by
    their session id."""
    key = session.encode()
    return [
        RawMessage(key, v, 0, i, _signer(v).headers(key, v or b"")) for i, v in enumerate(values)
    ]


def _signer(value: bytes | None) -> KeySigner | ServiceSigner:
    """Control events come from the service that makes their kind, the rest from the
    runtime."""
    try:
        if value and codec.writer_name(value) == CONTROL_EVENT_NAME:
            body = codec.decode(codec.CONTROL_EVENT, value)["body"][0]
            return SERVICES["prepare" if body.endswith("BudgetObservation") else "compaction"]
    except Exception:
        pass
    return RUNTIME


def events(*keys: str) -> list[RawMessage]:
    return batch(*(encode_event(user(k)) for k in keys))


def committed_keys(pub: FakePublisher) -> list[str]:
    return [decode_committed(m.value).event_key for m in pub.flushed if m.topic == "ctx.committed"]


@pytest.mark.spec("R15.3")
async def test_publishes_only_after_the_transaction_committed_then_flushes() -> None:
    proc, store = make()
    result = await proc.handle(events("a", "b", "c"))
    assert result.committed == 3
    assert store.committed_keys() == ["a", "b", "c"]
    # decode → transact → publish: the commit comes first, the flush (acknowledgements,
    # after which the driver commits the Kafka offsets) last.
    # (Savepoints inside the transaction, like the pre-emptive check's, are "release".)
    outer = [step for step in store.log if step != "release"]
    assert outer == ["commit"] + ["send ctx.committed"] * 3 + ["flush"]
    assert store.data.offsets == {("proc-test", "ctx.records", 0): 3}


@pytest.mark.spec("R15.3")
async def test_a_batch_is_applied_chunk_by_chunk_in_order_and_flushed_once() -> None:
    """Pipelining (issue 13): each chunk commits, then sends its records, before the next
    chunk's transaction starts; the acknowledgements are awaited once, at the end."""
    proc, store = make()
    proc.config = dataclasses.replace(CONFIG, pipeline_chunk=2)
    result = await proc.handle(events("a", "b", "c", "d", "e"))
    assert result.committed == 5
    assert store.committed_keys() == ["a", "b", "c", "d", "e"]
    outer = [step for step in store.log if step != "release"]
    sends = ["send ctx.committed"]
    assert outer == ["commit", *sends * 2, "commit", *sends * 2, "commit", *sends, "flush"]
    assert store.data.offsets == {("proc-test", "ctx.records", 0): 5}


@pytest.mark.spec("R15.3")
async def test_a_failure_in_a_later_chunk_fails_the_batch_and_redelivery_is_a_no_op() -> None:
    pub = FakePublisher(fail_next=None)
    proc, store = make(pub)
    proc.config = dataclasses.replace(CONFIG, pipeline_chunk=2)
    msgs = events("a", "b", "c", "d")
    sent = pub.send

    async def fail_on_c(topic: str, key: bytes | None, value: bytes) -> None:
        if topic == CONFIG.topic_committed and decode_committed(value).event_key == "c":
            raise ConnectionError("broker gone")
        await sent(topic, key, value)

    pub.send = fail_on_c  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        await proc.handle(msgs)
    assert pub.flushed == []  # nothing acknowledged: the driver commits no offset
    assert store.committed_keys() == ["a", "b", "c", "d"]  # both chunks committed
    pub.send = sent  # type: ignore[method-assign]
    again = await proc.handle(msgs)
    assert (again.committed, again.duplicates) == (0, 4)
    assert store.committed_keys() == ["a", "b", "c", "d"]


@pytest.mark.spec("R15.3")
async def test_a_publish_failure_fails_the_batch_and_its_redelivery_is_a_no_op() -> None:
    pub = FakePublisher(fail_next=ConnectionError("broker gone"))
    proc, store = make(pub)
    msgs = events("a", "b")
    with pytest.raises(ConnectionError):
        await proc.handle(msgs)
    # Nothing acknowledged: handle raised, so no driver commits the batch's offsets and
    # the batch is redelivered ...
    assert pub.flushed == []
    # ... where the database commit makes it a duplicate, republished (at-least-once).
    again = await proc.handle(msgs)
    assert (again.committed, again.duplicates) == (0, 2)
    assert store.committed_keys() == ["a", "b"]
    assert committed_keys(pub) == ["a", "b"]


@pytest.mark.spec("R3.3", "R15.3")
async def test_a_poison_record_is_dead_lettered_and_the_rest_commits_once() -> None:
    proc, store = make()
    store.poison_keys = {"c"}
    msgs = events("a", "b", "c", "d", "e")
    result = await proc.handle(msgs)
    assert (result.committed, result.isolated, result.dead_letters) == (4, 1, 1)
    assert store.committed_keys() == ["a", "b", "d", "e"]
    pub = proc.publisher
    assert isinstance(pub, FakePublisher)
    (letter,) = [decode_dead_letter(m.value) for m in pub.flushed if m.topic == "ctx.dead"]
    assert (letter.reason_code, letter.source_offset, letter.event_key) == ("apply_failed", 2, "c")
    assert "injected failure" in letter.reason
    assert letter.value == msgs[2].value  # the original bytes, for a replay
    # The batch is consumed past the poison record, and its key stays refused.
    assert store.data.offsets[("proc-test", "ctx.records", 0)] == 5
    assert store.data.outcomes[(SESSION, "c")] == "apply_failed"
    assert committed_keys(pub) == ["a", "b", "d", "e"]
    pub.flushed.clear()  # the letter lost with the processor, the batch redelivered
    again = await proc.handle(msgs)
    assert (again.committed, again.duplicates, again.dead_letters) == (0, 5, 1)
    (second,) = [decode_dead_letter(m.value) for m in pub.flushed if m.topic == "ctx.dead"]
    assert (second.reason_code, second.source_offset, second.value) == (
        "apply_failed",
        2,
        msgs[2].value,
    )


@pytest.mark.spec("R3.3")
async def test_undecodable_bytes_are_dead_lettered_before_any_transaction() -> None:
    proc, store = make()
    result = await proc.handle(batch(b"\x00garbage", None, encode_event(user("a"))))
    assert (result.committed, result.dead_letters) == (1, 2)
    pub = proc.publisher
    assert isinstance(pub, FakePublisher)
    codes = [decode_dead_letter(m.value).reason_code for m in pub.flushed if m.topic == "ctx.dead"]
    assert codes == ["bad_header", "empty_value"]  # not Avro; no value at all
    assert store.committed_keys() == ["a"]


@pytest.mark.spec("R3.1")
async def test_a_redelivered_batch_is_an_idempotent_hit() -> None:
    proc, store = make()
    msgs = events("a", "b")
    await proc.handle(msgs)
    before = dict(store.data.records)
    again = await proc.handle(msgs)
    assert (again.committed, again.duplicates, again.dead_letters) == (0, 2, 0)
    assert store.data.records == before
    assert store.data.sessions[SESSION].next_session_sequence == 3  # not advanced twice


def observation_inputs(active_job_id: str | None = None) -> ObservationInputs:
    placeholder = ControlEvent("", SESSION, "run-1", "main", 0, _observation(0))
    return ObservationInputs(
        placeholder,
        _observation(0),
        "main",
        validate_compaction({"context_ratio": 0.8}),
        "pol-1",
        LockedState(None, active_job_id),
        None,
        Counters(),
        Counters(),
        None,
    )


def _observation(estimated: int) -> BudgetObservation:
    return BudgetObservation(estimated, 1000, 100, 50, 600, 3, None, "fp", "pol-1")


def control(key: str, estimated: int) -> bytes:
    ev = ControlEvent(key, SESSION, "run-1", "main", 0, _observation(estimated))
    return encode_control(ev)


@pytest.mark.spec("R7.1")
async def test_a_trigger_that_fires_publishes_a_compaction_request_after_commit() -> None:
    proc, store = make()
    store.observations[SESSION] = observation_inputs()
    store.task_versions[SESSION] = 2
    result = await proc.handle(batch(encode_event(user("a")), control("obs-1", 900)))
    assert result.committed == 1
    pub = proc.publisher
    assert isinstance(pub, FakePublisher)
    (req,) = [
        decode_compaction_request(m.value)
        for m in pub.flushed
        if m.topic == CONFIG.topic_compaction_requests
    ]
    assert (req.session_id, req.task_version, req.trigger_reasons) == (
        SESSION,
        2,
        ("context_ratio",),
    )
    (applied,) = store.data.applied
    assert applied.report is not None and applied.report.kind == "job_started"
    assert store.log.index("commit") < store.log.index(f"send {CONFIG.topic_compaction_requests}")


def requests_sent(pub: FakePublisher) -> list[str]:
    return [
        decode_compaction_request(m.value).job_id
        for m in pub.flushed
        if m.topic == CONFIG.topic_compaction_requests
    ]


@pytest.mark.spec("R15.3", "R3.1")
async def test_a_redelivered_record_publishes_again_the_request_its_session_waits_on() -> None:
    """A job whose request was lost between the commit and the publish (the processor
    died there) is published again when the batch comes back as duplicates, even when
    no redelivered observation started it (a pre-emptive check's job)."""
    proc, store = make()
    store.observations[SESSION] = observation_inputs()
    await proc.handle(batch(encode_event(user("a")), control("obs-1", 900)))
    pub = proc.publisher
    assert isinstance(pub, FakePublisher)
    (job_id,) = requests_sent(pub)
    pub.flushed.clear()  # lost with the processor that committed it
    await proc.handle(batch(encode_event(user("b"))))
    assert requests_sent(pub) == []  # new records only: nothing is sent again
    result = await proc.handle(batch(encode_event(user("a"))))
    assert (result.committed, result.duplicates) == (0, 1)
    assert requests_sent(pub) == [job_id]


@pytest.mark.spec("R7.2", "R9.1")
async def test_an_observation_sees_its_sessions_records_before_it_and_splits_no_other() -> None:
    # Offset order within a session; across sessions, records wait for one write: an
    # observation of session 1 does not cut session 2's records in two.
    proc, store = make()
    store.add_session(dataclasses.replace(open_session(), session_id="sess-2"))
    store.observations[SESSION] = observation_inputs()
    other = [make_event(RecordKind.USER_INPUT, k, session="sess-2") for k in ("b1", "b2", "b3")]
    sent = [
        ("sess-2", encode_event(other[0])),
        (SESSION, control("obs-1", 100)),
        ("sess-2", encode_event(other[1])),
        (SESSION, encode_event(user("a1"))),
        (SESSION, control("obs-2", 100)),
        ("sess-2", encode_event(other[2])),
    ]
    messages = [
        RawMessage(sid.encode(), v, 0, i, _signer(v).headers(sid.encode(), v))
        for i, (sid, v) in enumerate(sent)
    ]
    result = await proc.handle(messages)
    assert result.committed == 4
    assert store.steps == ["control obs-1", "records b1 b2 a1", "control obs-2", "records b3"]


@pytest.mark.spec("R15.3")
async def test_a_control_event_that_fails_is_dead_lettered_alone() -> None:
    proc, store = make()
    store.observations[SESSION] = observation_inputs()
    store.poison_keys = {"obs-bad"}
    result = await proc.handle(
        batch(control("obs-bad", 900), encode_event(user("a")), control("obs-ok", 100))
    )
    assert (result.committed, result.dead_letters) == (1, 1)
    pub = proc.publisher
    assert isinstance(pub, FakePublisher)
    (letter,) = [decode_dead_letter(m.value) for m in pub.flushed if m.topic == "ctx.dead"]
    assert (letter.event_key, letter.reason_code) == ("obs-bad", "apply_failed")
    assert [e.report.event_key for e in store.data.applied if e.report] == ["obs-ok"]
    # Its savepoint undid it alone: no request of the failed check is published.
    assert pub.on(CONFIG.topic_compaction_requests) == []


@pytest.mark.spec("R15.3")
async def test_a_control_event_for_an_unknown_session_is_dead_lettered() -> None:
    proc, store = make()
    ev = ControlEvent("obs-x", "sess-unknown", "run-1", "main", 0, _observation(900))
    result = await proc.handle(batch(encode_control(ev), session="sess-unknown"))
    assert result.dead_letters == 1
    pub = proc.publisher
    assert isinstance(pub, FakePublisher)
    (letter,) = [decode_dead_letter(m.value) for m in pub.flushed if m.topic == "ctx.dead"]
    assert letter.reason_code == "unknown_session"
    assert store.data.applied == []


async def test_a_committed_record_carries_every_field() -> None:
    """The committed record is built without ``__init__`` (``contracts.built``): it has
    exactly CommittedRecord's fields, and decodes to what the event and its plan say."""
    pub = FakePublisher()
    proc, _ = make(pub)
    await proc.handle(events("a"))
    (msg,) = [m for m in pub.flushed if m.topic == "ctx.committed"]
    rec = decode_committed(msg.value)
    assert {f.name for f in dataclasses.fields(rec)} == set(rec.__dict__)
    assert (rec.session_id, rec.event_key, rec.kind, rec.session_sequence) == (
        SESSION,
        "a",
        "user_input",
        1,
    )
    assert rec.record_id.startswith("rec_") and rec.token_count > 0
    assert (rec.source_partition, rec.source_offset) == (0, 0)
