"""The hostile-tenant probe on the bus: tenant B, with its own host key and broker
principal only, writes what docs/security.md says the processor or the broker refuses,
and the operator's view (the dead-letter topic as the ``cli`` principal, Prepare's
read-back routes with each space's own key) tells what became of it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from devstack import events as ev
from devstack.probe_world import ProbeResult, Target, World, until, verdict
from domain.context.envelope import Headers
from schemas.contracts import Content, ContextEvent
from schemas.wire import (
    CompactionOutcome,
    ControlEvent,
    DeadLetter,
    decode_dead_letter,
    encode_control,
    encode_event,
)
from services.bus import signer_for
from streams.kafka.auth import KafkaAuth, kafka_auth

At = tuple[int, int]  # (partition, offset) of a message on the records topic


class Letters:
    """The dead letters of the records topic written since the watch began, by the
    (partition, offset) of the message each refuses."""

    def __init__(self, consumer: AIOKafkaConsumer, records_topic: str) -> None:
        self._consumer, self._records = consumer, records_topic
        self.found: dict[At, DeadLetter] = {}

    async def _read(self) -> None:
        for msgs in (await self._consumer.getmany(timeout_ms=200)).values():
            for m in msgs:
                dl = decode_dead_letter(m.value or b"")
                if dl.source_topic == self._records:
                    self.found[(dl.source_partition, dl.source_offset)] = dl

    async def at(self, where: At, timeout: float = 15.0) -> DeadLetter | None:
        """The letter of the message at ``where``, once the processor wrote it."""
        deadline = time.monotonic() + timeout
        while where not in self.found and time.monotonic() < deadline:
            await self._read()
        return self.found.get(where)


@asynccontextmanager
async def watching(target: Target) -> AsyncIterator[Letters]:
    """Letters from the dead-letter topic's current end on, read as the operator's
    ``cli`` principal (the one ``agentloom dlq`` uses)."""
    s = target.settings
    consumer = AIOKafkaConsumer(
        bootstrap_servers=s.kafka_bootstrap,
        enable_auto_commit=False,
        **kafka_auth(s, "cli").client_kwargs(),
    )
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()  # a fresh client knows no topic yet
        parts = consumer.partitions_for_topic(s.topic_dead_letter) or set()
        tps = [TopicPartition(s.topic_dead_letter, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:
            await consumer.position(tp)  # fixed now: letters of later attacks are after it
        yield Letters(consumer, s.topic_records)
    finally:
        await consumer.stop()


@asynccontextmanager
async def producer_of(target: Target, auth: KafkaAuth) -> AsyncIterator[AIOKafkaProducer]:
    p = AIOKafkaProducer(
        bootstrap_servers=target.settings.kafka_bootstrap,
        request_timeout_ms=5000,
        **auth.client_kwargs(),
    )
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


async def send(
    p: AIOKafkaProducer, topic: str, key: bytes, value: bytes, headers: Headers | None
) -> At:
    md = await p.send_and_wait(topic, value, key=key, headers=headers)
    return md.partition, md.offset


def signed(api_key: str, key: bytes, value: bytes) -> Headers:
    signer = signer_for(api_key)
    assert signer is not None, "not an API key"
    return signer.headers(key, value)


def describe(dl: DeadLetter | None) -> str:
    """A letter as the probe compares it: its reason, the space it counts in and
    whether it names a session."""
    if dl is None:
        return "no dead letter"
    return f"dead letter {dl.reason_code}, space {dl.space_id or '-'}"


Probe = Callable[[World, Letters, AIOKafkaProducer], Awaitable[ProbeResult]]


async def _refused_event(
    w: World,
    letters: Letters,
    p: AIOKafkaProducer,
    event: ContextEvent,
    key: str,
    headers: Callable[[bytes, bytes], Headers | None],
) -> tuple[DeadLetter | None, At]:
    value, k = encode_event(event), key.encode()
    at = await send(p, w.target.settings.topic_records, k, value, headers(k, value))
    return await letters.at(at), at


async def _letter_and_outcome(
    w: World,
    letters: Letters,
    p: AIOKafkaProducer,
    event: ContextEvent,
    key: str,
    signer: str | None = None,
    by_position: bool = False,
) -> tuple[str, str]:
    """An event of B's own session, sent under message key ``key`` and signed with
    ``signer`` (B's host key by default): its letter (``describe``) and the outcome B's
    event-outcome route then answers for its event key (asked with the message's
    partition and offset when ``by_position``: a letter no space is counted under)."""
    dl, (part, off) = await _refused_event(
        w, letters, p, event, key, lambda k, v: signed(signer or w.b.key, k, v)
    )
    params = {"partition": part, "offset": off} if by_position else {}
    async with w.http(w.b.key) as http:
        path = f"/v1/sessions/{w.b.run.session_id}/events/{event.event_key}"
        got = (await http.get(path, params=params)).json()
    return describe(dl), f"outcome {got.get('outcome')} {got.get('code')}"


async def scope_mismatch(w: World, letters: Letters, p: AIOKafkaProducer) -> ProbeResult:
    """B signs with its own key an event of its own space naming A's session."""
    as_b = dataclasses.replace(w.a.run, space_id=w.b.space)
    event = ev.user(as_b, f"B writes into A {w.marker}", f"b-scope-{w.tag}")
    dl, _ = await _refused_event(
        w, letters, p, event, w.a.run.session_id, lambda k, v: signed(w.b.key, k, v)
    )
    named = "" if dl is None or dl.session_id != w.a.run.session_id else ", names A's session"
    expected = f"dead letter scope_mismatch, space {w.b.space}"
    return verdict("bus.scope_mismatch", "bus", expected, describe(dl) + named)


async def claims_a_space(w: World, letters: Letters, p: AIOKafkaProducer) -> ProbeResult:
    """B signs with its own key an event in A's space and session."""
    event = ev.user(w.a.run, f"B speaks as A {w.marker}", f"b-as-a-{w.tag}")
    dl, _ = await _refused_event(
        w, letters, p, event, w.a.run.session_id, lambda k, v: signed(w.b.key, k, v)
    )
    expected = f"dead letter unauthenticated_event, space {w.b.space}"
    return verdict("bus.claims_a_space", "bus", expected, describe(dl))


async def key_mismatch(w: World, letters: Letters, p: AIOKafkaProducer) -> ProbeResult:
    """B's event of its own session, keyed by A's session (A's partition)."""
    event = ev.user(w.b.run, f"B on A's partition {w.marker}", f"b-key-{w.tag}")
    letter, told = await _letter_and_outcome(w, letters, p, event, w.a.run.session_id)
    expected = f"dead letter key_mismatch, space {w.b.space}; B's outcome dead_letter key_mismatch"
    return verdict("bus.key_mismatch", "bus", expected, f"{letter}; B's {told}")


async def unsigned(w: World, letters: Letters, p: AIOKafkaProducer) -> ProbeResult:
    """An event of A's session without an envelope."""
    event = ev.user(w.a.run, f"unsigned {w.marker}", f"b-unsigned-{w.tag}")
    dl, _ = await _refused_event(w, letters, p, event, w.a.run.session_id, lambda k, v: None)
    return verdict(
        "bus.unsigned", "bus", "dead letter unauthenticated_event, space -", describe(dl)
    )


async def wrong_signature(w: World, letters: Letters, p: AIOKafkaProducer) -> ProbeResult:
    """B's envelope over another value than the one sent (a tampered message)."""
    event = ev.user(w.a.run, f"tampered {w.marker}", f"b-tampered-{w.tag}")
    dl, _ = await _refused_event(
        w, letters, p, event, w.a.run.session_id, lambda k, v: signed(w.b.key, k, v + b" ")
    )
    return verdict(
        "bus.wrong_signature", "bus", "dead letter unauthenticated_event, space -", describe(dl)
    )


async def user_key_append(w: World, letters: Letters, p: AIOKafkaProducer) -> ProbeResult:
    """An append of B's own session signed with B's user (not host) key."""
    event = ev.user(w.b.run, f"user key {w.marker}", f"b-user-{w.tag}")
    letter, told = await _letter_and_outcome(
        w, letters, p, event, w.b.run.session_id, signer=w.b.user_key, by_position=True
    )
    expected = "dead letter unauthenticated_event, space -; outcome dead_letter not_applied"
    return verdict("bus.user_key_append", "bus", expected, f"{letter}; {told}")


async def foreign_blob(w: World, letters: Letters, p: AIOKafkaProducer) -> ProbeResult:
    """An append of B's own session whose content is a reference to A's blob (its hash
    and length): only the event's space's blobs may be referenced."""
    event = dataclasses.replace(
        ev.user(w.b.run, "", f"b-blob-{w.tag}"),
        content=Content.reference(*w.a.blob, "text/plain"),
    )
    letter, told = await _letter_and_outcome(w, letters, p, event, w.b.run.session_id)
    expected = f"dead letter blob_missing, space {w.b.space}; B's outcome dead_letter blob_missing"
    return verdict("bus.foreign_blob_reference", "bus", expected, f"{letter}; B's {told}")


async def forged_outcome(w: World, letters: Letters, p: AIOKafkaProducer) -> ProbeResult:
    """A compaction outcome (a summary of A's records) sent with B's runtime login and
    signed with B's key: only the compaction service makes one."""
    job = f"cmp_probe_{w.tag}"
    body = CompactionOutcome(
        job,
        "succeeded",
        "save",
        summary_id=f"sum_{w.tag}",
        summary_json=json.dumps({"draft": {}, "text": f"forged summary {w.marker}"}),
        covered_ranges=((1, 3),),
        covered_record_ids=(w.a.record_id,),
        summary_tokens=1,
        covered_tokens=100,
    )
    run = w.a.run
    value = encode_control(
        ControlEvent(f"outcome:{job}", run.session_id, run.run_id, run.instance_id, 1, body)
    )
    k = run.session_id.encode()
    at = await send(p, w.target.settings.topic_records, k, value, signed(w.b.key, k, value))
    dl = await letters.at(at)
    expected = f"dead letter unauthenticated_event, space {w.b.space}"
    return verdict("bus.forged_compaction_outcome", "bus", expected, describe(dl))


async def a_view_untouched(w: World) -> ProbeResult:
    """After every attack above: A's next prepare holds none of B's text and no summary,
    and A's event outcomes know none of B's keys."""
    prepared = await w.a.client.prepare(w.a.run)
    leaked = w.marker in json.dumps(prepared["messages"])
    summary = prepared["dependency_versions"].get("summary_id")
    async with w.http(w.a.key) as http:
        outcomes = {
            (await http.get(f"/v1/sessions/{w.a.run.session_id}/events/{k}-{w.tag}"))
            .json()
            .get("outcome")
            for k in ("b-scope", "b-as-a", "b-unsigned", "b-tampered")
        }
    observed = f"B's text in A's view: {leaked}; summary: {summary}; outcomes {sorted(outcomes)}"
    expected = "B's text in A's view: False; summary: None; outcomes ['unknown']"
    return verdict("bus.a_view_untouched", "bus", expected, observed)


DEAD_LETTER_METRICS = ("dead_letters", "processor_dead_letters")


async def _rollups(w: World, key: str) -> list[dict[str, object]]:
    async with w.http(key) as http:
        r = await http.get("/v1/analytics/rollups", params={"window": "1h"})
    rows = r.json().get("rows") if r.status_code == 200 else None
    return rows if isinstance(rows, list) else []


def counted(rows: list[dict[str, object]]) -> set[tuple[str, str]]:
    """(metric, label) of the dead-letter rows counted in a space."""
    return {
        (str(r["metric"]), str(r["label"]))
        for r in rows
        if r.get("metric") in DEAD_LETTER_METRICS and int(str(r.get("value") or 0)) > 0
    }


async def attribution(w: World) -> ProbeResult:
    """Analytics count B's refused writes in B's space (polled until they appear) and
    none in A's."""
    want = {(m, "scope_mismatch") for m in DEAD_LETTER_METRICS}
    of_b = counted(await until(lambda: _rollups(w, w.b.key), lambda r: want <= counted(r), 20))
    of_a = counted(await _rollups(w, w.a.key))
    observed = f"B counts scope_mismatch: {want <= of_b}; A counts {sorted(of_a)}"
    return verdict("bus.attribution", "bus", "B counts scope_mismatch: True; A counts []", observed)


async def _write_refused(target: Target, auth: KafkaAuth, topic: str) -> str:
    try:
        async with producer_of(target, auth) as p:
            await p.send_and_wait(topic, b"hostile", key=b"k")
    except KafkaError as exc:
        return f"refused ({type(exc).__name__})"
    return "written"


async def _read_refused(target: Target, auth: KafkaAuth, topic: str) -> str:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=target.settings.kafka_bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        request_timeout_ms=5000,
        **auth.client_kwargs(),
    )
    try:
        await consumer.start()
        await consumer.getmany(timeout_ms=3000)
    except KafkaError as exc:
        return f"refused ({type(exc).__name__})"
    finally:
        await consumer.stop()
    return "read"


async def acl_probes(w: World) -> list[ProbeResult]:
    """B's broker principal on what only our services may write or read."""
    s, auth = w.target.settings, w.b.kafka
    writes = {
        "bus.acl_write_observability": s.topic_observability,
        "bus.acl_write_dead_letter": s.topic_dead_letter,
        "bus.acl_write_committed": s.topic_committed,
        "bus.acl_write_compaction_requests": s.topic_compaction_requests,
    }
    got = await asyncio.gather(
        *(_write_refused(w.target, auth, t) for t in writes.values()),
        _read_refused(w.target, auth, s.topic_records),
    )
    names = [*writes, "bus.acl_read_records"]
    expected = "refused (TopicAuthorizationFailedError)"
    return [verdict(n, "bus", expected, o) for n, o in zip(names, got, strict=True)]


EVENT_PROBES: tuple[Probe, ...] = (
    scope_mismatch,
    claims_a_space,
    key_mismatch,
    unsigned,
    wrong_signature,
    user_key_append,
    foreign_blob,
    forged_outcome,
)


async def bus_probes(w: World, report: Callable[[ProbeResult], None]) -> list[ProbeResult]:
    out: list[ProbeResult] = []

    def done(r: ProbeResult) -> None:
        out.append(r)
        report(r)

    async with watching(w.target) as letters, producer_of(w.target, w.b.kafka) as p:
        for probe in EVENT_PROBES:
            done(await probe(w, letters, p))
    done(await a_view_untouched(w))
    done(await attribution(w))
    for r in await acl_probes(w):
        done(r)
    return out
