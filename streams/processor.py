"""The session processor's batch handler, independent of faust so that it can be driven
and tested directly: decode → validate → count tokens → plan → one PostgreSQL
transaction → publish committed events and dead letters.

Offsets are committed by the caller only after ``handle`` returns, i.e. after both the
database commit and the publishes were acknowledged. A crash anywhere before that means
redelivery, and redelivery is a no-op (unique keys + tracking rows).

No record stops the partition (issue 10.1): what cannot be decoded or validated is
dead-lettered before any SQL; whatever else fails the transaction is isolated by
bisecting the batch and dead-lettered, and the rest commits once. Only infrastructure
loss (``streams.faults.is_transient``) is retried, and past its bound ends the process.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import defaultdict
from dataclasses import dataclass, field

import asyncpg

from domain.accounting import text_key, token_text
from domain.planning import BatchPlan, Incoming, plan_batch
from domain.tokens import CachedCounter
from schemas import codec
from schemas.contracts import ContextEvent, ResourceActivationPayload
from schemas.errors import InvalidEvent
from schemas.validation import validate_control, validate_event
from schemas.wire import (
    CompactionRequest,
    ControlEvent,
    DeadLetter,
    ObservabilityEvent,
    decode_control,
    decode_event,
    encode_dead_letter,
    fit_dead_letter,
)
from storage import compaction as compaction_repo
from storage import ingest, processing
from streams.control import apply_controls, preempt
from streams.faults import describe_failure, is_transient, retry_transient
from streams.outgoing import Applied, ProcessorConfig, dead_letter, encode_applied
from streams.publish import Publisher

CONTROL_EVENT_NAME = "agentloom.context.v1.ControlEvent"

log = logging.getLogger("agentloom.processor")


@dataclass(frozen=True)
class RawMessage:
    key: bytes | None
    value: bytes | None
    partition: int
    offset: int


@dataclass
class BatchResult:
    committed: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    rejected: int = 0
    isolated: int = 0  # records the batch transaction could not apply (dead-lettered)
    codes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Control:
    """A decoded, validated control event and where it came from."""

    partition: int
    offset: int
    event: ControlEvent
    msg: RawMessage


Item = Incoming | Control


class BatchProcessor:
    def __init__(
        self,
        pool: asyncpg.Pool,
        publisher: Publisher,
        counter: CachedCounter,
        config: ProcessorConfig,
    ) -> None:
        self.pool = pool
        self.publisher = publisher
        self.counter = counter
        self.config = config

    async def handle(self, batch: list[RawMessage]) -> BatchResult:
        """Apply ``batch``; raise only for a transient (infrastructure) failure.

        No record can fail the batch (R3.3, R15.3): what does not decode or validate is
        dead-lettered before any SQL, and if the batch transaction still fails for
        another reason, the batch is bisected until the records it cannot apply are
        isolated — dead-lettered with the reason — while every other record commits
        exactly once (each part in its own transaction)."""
        dead: list[DeadLetter] = []
        async with self.pool.acquire() as conn:
            items = await self._admit(conn, batch, dead)
            offsets = _next_offsets(batch)
            try:
                parts = [await self._attempt(conn, items, offsets)]
                bad: list[tuple[Item, BaseException]] = []
            except Exception as exc:
                if is_transient(exc):
                    raise
                log.warning("batch of %d failed (%r): isolating what fails", len(items), exc)
                parts, bad = await self._isolate(conn, items, exc)
                await self._finish_isolated(conn, bad, offsets)
        result = BatchResult(isolated=len(bad))
        for item, error in bad:
            code, reason = describe_failure(error)
            dead.append(self._dead_item(item, code, reason))
            result.codes[code] = result.codes.get(code, 0) + 1
        for part in parts:
            dead += part.dead
            result.committed += part.records
            result.duplicates += part.duplicates
            result.rejected += part.rejected
            for code, n in part.codes.items():
                result.codes[code] = result.codes.get(code, 0) + n
            for topic, key, value in part.committed:
                await self.publisher.send(topic, key, value)
        await self._send_dead_letters(batch, dead)
        for part in parts:
            for topic, key, value in part.other:
                await self.publisher.send(topic, key, value)
        await self.publisher.flush()
        result.dead_letters = len(dead)
        return result

    async def _admit(
        self, conn: asyncpg.Connection, batch: list[RawMessage], dead: list[DeadLetter]
    ) -> list[Item]:
        """Decode, validate and count, in offset order; what fails is dead-lettered."""
        decoded: list[tuple[RawMessage, ContextEvent]] = []
        controls: list[Control] = []
        for msg in batch:
            try:
                if msg.value is None:
                    raise InvalidEvent("empty message value", reason_code="empty_value")
                if codec.writer_name(msg.value) == CONTROL_EVENT_NAME:
                    ctl = _decode_control(msg.value)
                    validate_control(ctl)
                    controls.append(Control(msg.partition, msg.offset, ctl, msg))
                    continue
                ev = decode_event(msg.value)
                validate_event(ev)
                decoded.append((msg, ev))
            except InvalidEvent as exc:
                dead.append(self._dead(msg, exc.reason_code, exc.message, None, None))
            except Exception as exc:  # hostile bytes: whatever a decoder may raise
                reason = f"{type(exc).__name__}: {exc}"
                dead.append(self._dead(msg, "undecodable", reason, None, None))
        if controls:
            # A control event names a session the processor owns; one that does not
            # exist is bad input, not a reason to stop (validated ids: a safe query).
            known = await processing.open_sessions(
                conn, sorted({c.event.session_id for c in controls})
            )
            for c in [c for c in controls if c.event.session_id not in known]:
                controls.remove(c)
                reason = f"session {c.event.session_id} is not open"
                dead.append(self._dead(c.msg, "unknown_session", reason, None, c.event.event_key))
        incoming = await self._count(conn, decoded, dead)
        return _in_offset_order(incoming, controls)

    async def _attempt(
        self, conn: asyncpg.Connection, items: list[Item], offsets: dict[int, int]
    ) -> Applied:
        """One transaction over ``items`` (in offset order); everything to publish is
        encoded inside it, so that not even an encoding error can follow a commit."""
        plan = BatchPlan()
        existing: dict[tuple[str, str], ingest.ExistingRecord] = {}
        requests: list[CompactionRequest] = []
        notes: list[ObservabilityEvent] = []
        failed: list[DeadLetter] = []
        async with conn.transaction():
            # Records and control events in offset order: a budget check must see the
            # counters as they were when Prepare observed, not those of later records
            # that happen to share its batch.
            chunk: list[Incoming] = []
            for item in items:
                if isinstance(item, Incoming):
                    chunk.append(item)
                    continue
                await self._apply_records(conn, chunk, plan, existing)
                chunk = []
                applied = await apply_controls(conn, [item.event])
                requests += applied.requests
                notes += applied.observability
                failed += [self._dead_item(item, f.code, f.reason) for f in applied.failures]
            await self._apply_records(conn, chunk, plan, existing)
            if plan.touched_sessions:
                requests += await self._preempt(conn, sorted(plan.touched_sessions), notes)
            await ingest.write_offsets(
                conn, self.config.consumer, self.config.topic_records, offsets
            )
            out = encode_applied(self.config, plan, existing, notes, requests)
        out.dead += failed
        return out

    async def _isolate(
        self, conn: asyncpg.Connection, items: list[Item], failure: BaseException
    ) -> tuple[list[Applied], list[tuple[Item, BaseException]]]:
        """Bisect a failed batch, in offset order: a part that commits is done (once), a
        part that fails is split again, down to the single items that fail alone."""
        parts: list[Applied] = []
        bad: list[tuple[Item, BaseException]] = []
        todo: list[tuple[list[Item], BaseException | None]] = [(items, failure)]
        while todo:
            part, error = todo.pop(0)
            if error is None:
                try:
                    parts.append(await self._attempt(conn, part, _offsets_of(part)))
                    continue
                except Exception as exc:
                    if is_transient(exc):
                        raise  # committed parts are redelivered as duplicates: a no-op
                    error = exc
            if len(part) == 1:
                log.error("offset %d cannot be applied: %r", part[0].offset, error)
                bad.append((part[0], error))
                continue
            mid = len(part) // 2
            todo[0:0] = [(part[:mid], None), (part[mid:], None)]
        return parts, bad

    async def _finish_isolated(
        self,
        conn: asyncpg.Connection,
        bad: list[tuple[Item, BaseException]],
        offsets: dict[int, int],
    ) -> None:
        """The batch is consumed: its offsets pass the isolated records, and each one's
        key is remembered as dead-lettered (so a caller waiting for it, like Prepare's
        run start, gets an answer, and a redelivery stays refused)."""
        async with conn.transaction():
            for item, exc in bad:
                if not isinstance(item, Incoming):
                    continue
                ev = item.event
                try:
                    async with conn.transaction():  # best effort: a savepoint
                        await processing.record_dead_letter(
                            conn,
                            ev.scope.session_id,
                            ev.event_key,
                            *describe_failure(exc),
                            ev.scope.space_id,
                            ev.scope.actor_id,
                        )
                except Exception as failure:
                    if is_transient(failure):
                        raise
                    log.warning("outcome of offset %d not recorded: %r", item.offset, failure)
            await ingest.write_offsets(
                conn, self.config.consumer, self.config.topic_records, offsets
            )

    async def _preempt(
        self, conn: asyncpg.Connection, session_ids: list[str], notes: list[ObservabilityEvent]
    ) -> list[CompactionRequest]:
        """Pre-emptive checks are an optimisation (Prepare checks again at the next
        action prepare): one that fails is undone (a savepoint) and skipped, never a
        reason to lose the batch's records."""
        mark = len(notes)
        try:
            async with conn.transaction():
                return await preempt(conn, session_ids, notes)
        except Exception as exc:
            if is_transient(exc):
                raise
            del notes[mark:]
            log.exception("pre-emptive check of %d sessions skipped", len(session_ids))
            return []

    async def _send_dead_letters(self, batch: list[RawMessage], dead: list[DeadLetter]) -> None:
        raw_by_offset = {(m.partition, m.offset): m for m in batch}
        for dl in dead:
            raw = raw_by_offset.get((dl.source_partition, dl.source_offset))
            if raw is not None and dl.value is None:
                dl = DeadLetter(**{**dl.__dict__, "key": raw.key, "value": raw.value})
            # Cut to what the producer accepts: a ~1 MB original must not stall us.
            dl = fit_dead_letter(dl)
            await self.publisher.send(self.config.topic_dead_letter, dl.key, encode_dead_letter(dl))
            log.warning(
                "dead letter %s at %s:%d: %s",
                dl.reason_code,
                self.config.topic_records,
                dl.source_offset,
                dl.reason[:300],
            )

    async def _apply_records(
        self,
        conn: asyncpg.Connection,
        chunk: list[Incoming],
        plan: BatchPlan,
        existing: dict[tuple[str, str], ingest.ExistingRecord],
    ) -> None:
        if not chunk:
            return
        keys: dict[str, set[str]] = defaultdict(set)
        ops: dict[str, set[tuple[str, str]]] = defaultdict(set)
        for inc in chunk:
            keys[inc.event.scope.session_id].add(inc.event.event_key)
            if inc.event.operation_id:
                ops[inc.event.scope.session_id].add((inc.event.operation_id, str(inc.event.kind)))
        states, found = await ingest.load_states(conn, keys, ops)
        part = plan_batch(chunk, states)
        await ingest.write_plan(
            conn, part, states, self.config.consumer, self.config.topic_records, {}
        )
        existing.update(found)
        await ingest.grow_view_tokens(conn, part, states)
        for nr in part.records:  # resource (de)activations: R11.8 revocation
            p = nr.incoming.event.payload
            if isinstance(p, ResourceActivationPayload):
                await compaction_repo.set_resource_state(
                    conn,
                    nr.incoming.event.scope.session_id,
                    p.resource_id,
                    p.active,
                    nr.session_sequence,
                )
        plan.touched_sessions |= part.touched_sessions
        plan.records += part.records
        plan.duplicates += part.duplicates
        plan.rejections += part.rejections

    async def _count(
        self,
        conn: asyncpg.Connection,
        decoded: list[tuple[RawMessage, ContextEvent]],
        dead: list[DeadLetter],
    ) -> list[Incoming]:
        refs = [ev.content.ref for _, ev in decoded if ev.content.ref]
        blobs = await ingest.blob_tokens(conn, refs) if refs else {}
        out: list[Incoming] = []
        for msg, obj in decoded:
            try:
                tokens, method = self._tokens(obj, blobs)
            except InvalidEvent as exc:
                dead.append(
                    self._dead(
                        msg, exc.reason_code, exc.message, obj.scope.session_id, obj.event_key
                    )
                )
                continue
            except Exception as exc:  # a tokenizer that chokes on one text
                code, reason = describe_failure(exc)
                dead.append(self._dead(msg, code, reason, obj.scope.session_id, obj.event_key))
                continue
            out.append(Incoming(obj, msg.partition, msg.offset, tokens, method))
        return out

    def _tokens(self, ev: ContextEvent, blobs: dict[str, tuple[int, str, int]]) -> tuple[int, str]:
        text = token_text(ev)
        if text is not None:
            return self.counter.count_keyed(text_key(text), text), self.counter.method
        found = blobs.get(ev.content.ref or "")
        if found is None:
            # R3.4: large content is stored first; a dangling reference is bad input.
            raise InvalidEvent(
                f"content ref {ev.content.ref} is not stored", reason_code="blob_missing"
            )
        tokens, method, length = found
        if length != ev.content.length:
            raise InvalidEvent(
                f"content.length {ev.content.length} but the stored blob has {length} bytes",
                reason_code="content_length_mismatch",
            )
        return tokens, method

    def _dead(
        self, msg: RawMessage, code: str, reason: str, session_id: str | None, event_key: str | None
    ) -> DeadLetter:
        return dead_letter(
            self.config,
            msg.partition,
            msg.offset,
            code,
            reason,
            session_id,
            event_key,
            msg.key,
            msg.value,
        )

    def _dead_item(self, item: Item, code: str, reason: str) -> DeadLetter:
        """A dead letter for a decoded item; its raw bytes are added when it is sent."""
        if isinstance(item, Control):
            return self._dead(item.msg, code, reason, item.event.session_id, item.event.event_key)
        return dead_letter(
            self.config,
            item.partition,
            item.offset,
            code,
            reason,
            item.event.scope.session_id,
            item.event.event_key,
        )


CRASH_EXIT_CODE = 70


async def handle_or_exit(
    proc: BatchProcessor,
    batch: list[RawMessage],
    transient_retry_s: float = 300.0,
    attempts: int = 3,
) -> None:
    """Handle a batch; exit the process at once when the infrastructure stays lost.

    ``handle`` isolates and dead-letters whatever record it cannot apply, so what
    reaches here is infrastructure: a transient failure (connection loss, serialization
    failure, deadlock) is retried with backoff for ``transient_retry_s``; anything else
    — a defect outside record isolation — is tried ``attempts`` times.

    Exiting (rather than raising) is deliberate: faust's ``take_events`` acks a batch in a
    ``finally`` even when the loop body raises, so an exception could let its offsets be
    committed. A dead process commits nothing; the batch is redelivered after restart,
    and redelivery is a no-op for whatever did commit.
    """
    for attempt in range(1, attempts + 1):
        try:
            result = await retry_transient(lambda: proc.handle(batch), transient_retry_s)
            log.info(
                "batch of %d: committed=%d duplicates=%d dead_letters=%d rejected=%d isolated=%d",
                len(batch),
                result.committed,
                result.duplicates,
                result.dead_letters,
                result.rejected,
                result.isolated,
            )
            return
        except Exception as exc:
            if is_transient(exc):
                log.critical("infrastructure lost for %.0fs", transient_retry_s, exc_info=True)
                break
            log.exception("batch of %d failed (attempt %d/%d)", len(batch), attempt, attempts)
            await asyncio.sleep(0.5 * attempt)
    log.critical("giving up on batch: exiting so that it is redelivered after restart")
    logging.shutdown()
    os._exit(CRASH_EXIT_CODE)


def _decode_control(data: bytes) -> ControlEvent:
    try:
        return decode_control(data)
    except InvalidEvent:
        raise
    except (KeyError, TypeError, ValueError) as exc:  # e.g. a covered range of 3 numbers
        raise InvalidEvent(
            f"control event does not map to the contract: {exc}", reason_code="bad_control"
        ) from exc


def _in_offset_order(incoming: list[Incoming], controls: list[Control]) -> list[Item]:
    items: list[Item] = [*incoming, *controls]
    items.sort(key=lambda i: (i.partition, i.offset))
    return items


def _next_offsets(batch: list[RawMessage]) -> dict[int, int]:
    out: dict[int, int] = {}
    for msg in batch:
        out[msg.partition] = max(out.get(msg.partition, 0), msg.offset + 1)
    return out


def _offsets_of(items: list[Item]) -> dict[int, int]:
    """Tracking rows for a part of a bisected batch: only as far as the part goes, so
    that a reader waiting for a later record does not wake before it commits."""
    out: dict[int, int] = {}
    for item in items:
        out[item.partition] = max(out.get(item.partition, 0), item.offset + 1)
    return out
