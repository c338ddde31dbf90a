"""``agentloom dlq replay``: send back only what the records topic really held.

A letter on the dead-letter topic is a claim: its source topic, offset and bytes are
whatever its writer put there, and a forged one once replayed an event into another
space's session, or onto any topic it named. So a replay:

- sends only to the deployment's records topic — the one topic the processor
  dead-letters from (``streams.outgoing.dead_letter``); a letter naming any other topic
  is refused (``topic_not_allowed``) before the broker is asked anything about it;
- reads the original at the letter's partition and offset of the records topic, and
  replays only a letter whose bytes are the original's: key and value equal (sha256
  reported), or for a letter cut to fit (``schemas.wire.fit_dead_letter``) the size and
  sha256 it recorded and the prefix it kept (``letter_mismatch``). An original no longer
  there (retention, a partition or offset that does not exist) cannot be checked, so
  the letter is not replayed (``original_unavailable``);
- republishes the original as the records topic holds it — key, value and Kafka headers
  (its writer's envelope, ``domain.context.envelope``), on its own partition (the session's
  single writer) — never the letter's copy. The processor then validates it like any
  event, signature included: a replay is its writer's own message sent again;
- goes on past a bad letter: each is reported (``Result``), none aborts the rest.

Every letter is audited (``storage.dlq_replays``, migration 021) with who ran the
replay — the OS user, the host and the broker principal — and logged; a letter's row is
written before its original is sent, so a replay the database cannot record does not
happen.
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Protocol

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from schemas.errors import ContextError
from schemas.settings import Settings
from schemas.wire import DeadLetter, truncated_original
from services.cli import dlq_verdict
from storage import dlq_replays
from storage.dlq_replays import LetterRow, Operator
from storage.roles import dsn_of
from streams.kafka.auth import kafka_auth

log = logging.getLogger("agentloom.dlq")
FETCH_TRIES = 3  # a fresh consumer's first fetches may come back empty
VERIFY_WAIT_S = 30.0  # how long a replay waits for the processor to pass what it sent


class AuditUnavailable(ContextError):
    """The replay cannot be recorded: nothing is sent."""

    code = "audit_unavailable"


class Located(Protocol):
    """A letter as ``dlq_cmd`` read it: where it sits on the dead-letter topic."""

    @property
    def ref(self) -> str: ...
    @property
    def letter(self) -> DeadLetter: ...


@dataclass(frozen=True)
class Original:
    """A message as the records topic holds it."""

    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class Result:
    """One letter's answer. ``outcome``: ``replayed`` (sent), ``skipped`` (the processor
    would ignore it as a duplicate: not sent), ``refused`` or ``failed``; ``expected``:
    what the processor was forecast to do (apply | ignore | refuse, ``dlq_verdict``);
    ``verified``: what it did with a replayed original, read back (``applied: …``,
    ``refused again: …``, ``not applied: …``, or ``not verified: …``)."""

    ref: str
    outcome: str
    code: str | None
    detail: str
    source: str
    value_sha256: str
    expected: str | None = None
    verified: str | None = None
    sent_to: tuple[int, int] | None = None  # (partition, offset) of the replayed original
    event: tuple[str, str] | None = None  # (session_id, event_key) of the original

    def wire(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("sent_to", "event")}
        at = self.sent_to
        out["replayed_at"] = None if at is None else f"{at[0]}:{at[1]}"
        return out

    @property
    def applied(self) -> bool:
        return self.outcome == "replayed" and (self.verified or "").startswith("applied")


def sha256(data: bytes | None) -> str:
    return hashlib.sha256(data or b"").hexdigest()


def mismatch(d: DeadLetter, original: Original) -> str | None:
    """Why the letter's bytes are not the original's (None: they are). Pure."""
    for what, mine, theirs in (("key", d.key, original.key), ("value", d.value, original.value)):
        cut = truncated_original(d, what)
        kept, held = mine or b"", theirs or b""
        if cut is None and kept != held:
            return (
                f"the letter's {what} (sha256 {sha256(kept)}) is not the original's"
                f" ({sha256(held)})"
            )
        if cut is not None and (cut != (len(held), sha256(held)) or not held.startswith(kept)):
            return f"the letter's cut {what} does not match the original's size and sha256"
    return None


def operator(settings: Settings) -> Operator:
    """Who replays: the OS user running the command and the broker principal it uses."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a bare container)
        user = f"uid:{os.getuid()}"
    auth = kafka_auth(settings, "cli")
    principal = auth.username if auth.sasl and auth.username else "anonymous"
    return Operator(user, principal, socket.gethostname())


class _Sources:
    """Reads originals from the records topic (one consumer, assigned per letter)."""

    def __init__(self, consumer: AIOKafkaConsumer, topic: str) -> None:
        self.consumer, self.topic = consumer, topic

    async def original(self, d: DeadLetter) -> Original | None:
        parts = self.consumer.partitions_for_topic(self.topic)
        if not parts:
            await self.consumer._client.force_metadata_update()
            parts = self.consumer.partitions_for_topic(self.topic) or set()
        if d.source_partition not in parts:
            return None
        tp = TopicPartition(self.topic, d.source_partition)
        self.consumer.assign([tp])
        lo = (await self.consumer.beginning_offsets([tp]))[tp]
        hi = (await self.consumer.end_offsets([tp]))[tp]
        if not lo <= d.source_offset < hi:
            return None
        self.consumer.seek(tp, d.source_offset)
        for _ in range(FETCH_TRIES):
            msgs = (await self.consumer.getmany(tp, timeout_ms=3000, max_records=1)).get(tp, [])
            for m in msgs:
                if m.offset != d.source_offset or m.value is None:
                    return None  # a transaction marker or a tombstone: nothing to replay
                return Original(m.key, m.value, tuple(m.headers or ()))
        return None


class Replay:
    """One run of ``dlq replay``: each letter checked, sent or refused, and audited."""

    def __init__(self, settings: Settings, conn: asyncpg.Connection, who: Operator) -> None:
        self.settings, self.conn, self.who = settings, conn, who
        self.replay_id = f"rpl_{uuid.uuid4().hex[:16]}"
        self.allowed = frozenset({settings.topic_records})
        kw: dict[str, Any] = {"bootstrap_servers": settings.kafka_bootstrap}
        kw |= kafka_auth(settings, "cli").client_kwargs()
        self.consumer = AIOKafkaConsumer(enable_auto_commit=False, **kw)
        # acks=all and idempotence: a replayed record is written once per send even if
        # the leader changes mid-send; the processor dedupes by event key anyway (R3.1).
        self.producer = AIOKafkaProducer(acks="all", enable_idempotence=True, **kw)

    async def run(self, letters: list[Located]) -> list[Result]:
        await self.consumer.start()
        try:
            await self.producer.start()
            try:
                sources = _Sources(self.consumer, self.settings.topic_records)
                results = [await self.guarded(x, sources) for x in letters]
            finally:
                await self.producer.stop()
        finally:
            await self.consumer.stop()
        return [await self.verify(r) for r in results]

    async def guarded(self, x: Located, sources: _Sources) -> Result:
        """``one``, where whatever breaks on this letter is its own failure, reported:
        the rest go on (only an unrecordable replay stops them all: fail closed)."""
        try:
            return await self.one(x, sources)
        except AuditUnavailable:
            raise
        except Exception as exc:
            log.exception("letter %s could not be replayed", x.ref)
            row = self._row(x)
            return await self._refuse(row, "letter_failed", f"{type(exc).__name__}: {exc}")

    def _row(self, x: Located) -> LetterRow:
        d = x.letter
        return LetterRow(
            x.ref, self.settings.topic_dead_letter, d.source_topic, d.source_partition,
            d.source_offset, d.session_id, d.event_key, d.reason_code, sha256(d.value),
        )  # fmt: skip

    async def one(self, x: Located, sources: _Sources) -> Result:
        d = x.letter
        row = self._row(x)
        if d.source_topic not in self.allowed:
            why = f"{d.source_topic} is not a source topic of this deployment"
            return await self._refuse(row, "topic_not_allowed", why)
        try:
            original = await sources.original(d)
        except Exception as exc:  # a broker error on this letter: reported, the rest go on
            return await self._refuse(row, "original_unavailable", f"{type(exc).__name__}: {exc}")
        at = f"{d.source_topic}:{d.source_partition}:{d.source_offset}"
        if original is None:
            why = f"no original at {at} (retention, or no such partition or offset)"
            return await self._refuse(row, "original_unavailable", why)
        why_not = mismatch(d, original)
        if why_not is not None:
            return await self._refuse(row, "letter_mismatch", f"{why_not} at {at}")
        check = dlq_verdict.replayable(original.key, original.value, original.headers)
        if check.event is None:
            return await self._refuse(row, check.code or "not_replayable", f"{check.why} at {at}")
        ev = check.event
        op = (ev.operation_id, str(ev.kind)) if ev.operation_id else None
        known = await dlq_replays.known(self.conn, ev.scope.session_id, ev.event_key, op)
        fc = dlq_verdict.forecast(ev, known)
        event = (ev.scope.session_id, ev.event_key)
        if fc.expect == dlq_verdict.IGNORE:  # sending it would change nothing: not sent
            await self._audit(row, "skipped", fc.code, fc.why)
            return self._result(row, "skipped", fc.code, fc.why, fc.expect, event=event)
        if fc.expect != dlq_verdict.APPLY:
            await self._audit(row, "refused", fc.code, fc.why)
            return self._result(row, "refused", fc.code, fc.why, fc.expect, event=event)
        return await self._send(row, original, event)

    async def _send(self, row: LetterRow, original: Original, event: tuple[str, str]) -> Result:
        await self._audit(row, "replaying")  # before the send: no unrecorded replay
        try:
            md = await self.producer.send_and_wait(
                row.source_topic,
                original.value,
                key=original.key,
                headers=list(original.headers),
                partition=row.source_partition,
            )
        except Exception as exc:  # the broker refused it: reported, the rest go on
            detail = f"{type(exc).__name__}: {exc}"
            await self._settle(row, "failed", "publish_failed", detail)
            return self._result(row, "failed", "publish_failed", detail, dlq_verdict.APPLY)
        await self._settle(row, "replayed", None, "")
        sent = (md.partition, md.offset)
        return self._result(row, "replayed", None, "", dlq_verdict.APPLY, sent, event)

    async def verify(self, r: Result) -> Result:
        """Read back what the processor did with a replayed original, once it passed the
        sent offset (at most ``VERIFY_WAIT_S``); recorded in the audit row."""
        if r.sent_to is None or r.event is None:
            return r
        topic, consumer = self.settings.topic_records, self.settings.processor_id
        deadline = time.monotonic() + VERIFY_WAIT_S
        while not await dlq_replays.passed(self.conn, consumer, topic, *r.sent_to):
            if time.monotonic() > deadline:
                p, o = r.sent_to
                why = f"not verified: the processor did not pass {topic}:{p}:{o}"
                return replace(r, verified=f"{why} in {VERIFY_WAIT_S:.0f} s")
            await asyncio.sleep(0.1)
        code, what = dlq_verdict.read_back(await dlq_replays.known(self.conn, *r.event, None))
        try:
            await dlq_replays.verified(self.conn, self.replay_id, r.ref, code, what)
        except (asyncpg.PostgresError, OSError) as exc:
            raise AuditUnavailable(f"the replay's outcome cannot be recorded: {exc}") from exc
        return replace(r, code=code, verified=what)

    async def _refuse(self, row: LetterRow, code: str, detail: str) -> Result:
        await self._audit(row, "refused", code, detail)
        return self._result(row, "refused", code, detail)

    def _result(
        self,
        row: LetterRow,
        outcome: str,
        code: str | None,
        detail: str,
        expected: str | None = None,
        sent_to: tuple[int, int] | None = None,
        event: tuple[str, str] | None = None,
    ) -> Result:
        w = self.who
        log.warning(
            "dlq replay %s of %s by os_user=%s principal=%s host=%s: %s%s %s",
            self.replay_id, row.letter_ref, w.os_user, w.principal, w.host, outcome,
            f" ({code})" if code else "", detail,
        )  # fmt: skip
        source = f"{row.source_topic}:{row.source_partition}:{row.source_offset}"
        return Result(
            row.letter_ref, outcome, code, detail, source, row.value_sha256, expected,
            None, sent_to, event,
        )  # fmt: skip

    async def _audit(
        self, row: LetterRow, outcome: str, code: str | None = None, detail: str | None = None
    ) -> None:
        try:
            await dlq_replays.record(
                self.conn, self.replay_id, self.who, row, outcome, code, detail
            )
        except (asyncpg.PostgresError, OSError) as exc:
            raise AuditUnavailable(f"the replay cannot be recorded: {exc}") from exc

    async def _settle(self, row: LetterRow, outcome: str, code: str | None, detail: str) -> None:
        try:
            await dlq_replays.settle(
                self.conn, self.replay_id, row.letter_ref, outcome, code, detail
            )
        except (asyncpg.PostgresError, OSError) as exc:
            raise AuditUnavailable(f"the replay's outcome cannot be recorded: {exc}") from exc


async def replay(settings: Settings, letters: list[Located]) -> tuple[str, Operator, list[Result]]:
    """Check, send and audit ``letters``; the database is reached first (fail closed)."""
    try:
        conn = await asyncpg.connect(dsn_of(settings, "cli"))
    except (asyncpg.PostgresError, OSError) as exc:
        raise AuditUnavailable(f"the audit table is out of reach: {exc}") from exc
    try:
        r = Replay(settings, conn, operator(settings))
        return r.replay_id, r.who, await r.run(letters)
    finally:
        await conn.close()
