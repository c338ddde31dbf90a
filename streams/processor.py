"""The session processor's batch handler, independent of faust so that it can be driven
and tested directly: decode → validate → count tokens → plan → one PostgreSQL
transaction → publish committed events and dead letters.

Offsets are committed by the caller only after ``handle`` returns, i.e. after both the
database commit and the publishes were acknowledged. A crash anywhere before that means
redelivery, and redelivery is a no-op (unique keys + tracking rows).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol

import asyncpg

from schemas import codec
from schemas.contracts import ContextEvent, ResourceActivationPayload
from schemas.errors import InvalidEvent
from schemas.validation import validate_event
from schemas.wire import (
    CommittedRecord,
    CompactionRequest,
    ControlEvent,
    DeadLetter,
    ObservabilityEvent,
    decode_control,
    decode_event,
    encode_committed,
    encode_compaction_request,
    encode_dead_letter,
    encode_observability,
)
from services.core.tokens import CachedCounter, make_counter
from services.settings import Settings
from storage import compaction as compaction_repo
from storage import ingest
from streams.accounting import text_key, token_text
from streams.control import apply_controls, preempt
from streams.planning import BatchPlan, Incoming, SessionState, plan_batch

CONTROL_EVENT_NAME = "agentloom.context.v1.ControlEvent"

log = logging.getLogger("agentloom.processor")


@dataclass(frozen=True)
class RawMessage:
    key: bytes | None
    value: bytes | None
    partition: int
    offset: int


class Publisher(Protocol):
    async def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Queue a message; ``flush`` waits until all queued messages are acknowledged."""

    async def flush(self) -> None: ...


@dataclass
class BatchResult:
    committed: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    rejected: int = 0
    codes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessorConfig:
    consumer: str
    topic_records: str
    topic_committed: str
    topic_dead_letter: str
    topic_compaction_requests: str = "ctx.compaction.requests"
    topic_observability: str = "ctx.observability"


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
        result = BatchResult()
        dead: list[DeadLetter] = []
        decoded: list[tuple[RawMessage, ContextEvent]] = []
        controls: list[tuple[int, int, ControlEvent]] = []
        for msg in batch:
            try:
                if msg.value is None:
                    raise InvalidEvent("empty message value", reason_code="empty_value")
                if codec.writer_name(msg.value) == CONTROL_EVENT_NAME:
                    controls.append((msg.partition, msg.offset, decode_control(msg.value)))
                    continue
                ev = decode_event(msg.value)
                validate_event(ev)
                decoded.append((msg, ev))
            except InvalidEvent as exc:
                dead.append(self._dead(msg, exc.reason_code, exc.message, None, None))

        next_offsets: dict[int, int] = {}
        for msg in batch:
            next_offsets[msg.partition] = max(next_offsets.get(msg.partition, 0), msg.offset + 1)

        plan = BatchPlan()
        existing: dict[tuple[str, str], ingest.ExistingRecord] = {}
        requests: list[CompactionRequest] = []
        notes: list[ObservabilityEvent] = []
        async with self.pool.acquire() as conn:
            incoming = await self._count(conn, decoded, dead)
            async with conn.transaction():
                # Records and control events in offset order: a budget check must see the
                # counters as they were when Prepare observed, not those of later records
                # that happen to share its batch.
                chunk: list[Incoming] = []
                for item in _in_offset_order(incoming, controls):
                    if isinstance(item, Incoming):
                        chunk.append(item)
                        continue
                    await self._apply_records(conn, chunk, plan, existing)
                    chunk = []
                    applied = await apply_controls(conn, [item])
                    requests += applied.requests
                    notes += applied.observability
                await self._apply_records(conn, chunk, plan, existing)
                if plan.touched_sessions:
                    requests += await preempt(conn, sorted(plan.touched_sessions), notes)
                await ingest.write_offsets(
                    conn, self.config.consumer, self.config.topic_records, next_offsets
                )

        now = int(time.time() * 1000)
        for nr in plan.records:
            ev = nr.incoming.event
            await self._send_committed(
                CommittedRecord(
                    record_id=nr.record_id,
                    session_id=ev.scope.session_id,
                    session_sequence=nr.session_sequence,
                    run_id=ev.scope.run_id,
                    instance_id=ev.scope.instance_id,
                    instance_sequence=nr.instance_sequence,
                    event_key=ev.event_key,
                    kind=str(ev.kind),
                    token_count=nr.incoming.token_count,
                    token_method=nr.incoming.token_method,
                    content_sha256=ev.content.sha256,
                    committed_at_ms=now,
                    source_partition=nr.incoming.partition,
                    source_offset=nr.incoming.offset,
                )
            )
        for inc in plan.duplicates:
            # Republish: the first attempt may have crashed between the database commit
            # and this publish. The committed topic is at-least-once; consumers dedupe
            # on record_id.
            old = existing.get((inc.event.scope.session_id, inc.event.event_key))
            if old is not None:
                # ExistingRecord holds exactly the committed fields; add when/where.
                await self._send_committed(
                    CommittedRecord(
                        **old.__dict__,
                        committed_at_ms=now,
                        source_partition=inc.partition,
                        source_offset=inc.offset,
                    )
                )
        for rej in plan.rejections:
            if rej.dead_letter:
                msg = RawMessage(None, None, rej.incoming.partition, rej.incoming.offset)
                dead.append(
                    self._dead(
                        msg,
                        rej.code,
                        rej.message,
                        rej.incoming.event.scope.session_id,
                        rej.incoming.event.event_key,
                    )
                )
            else:
                result.rejected += 1
            result.codes[rej.code] = result.codes.get(rej.code, 0) + 1
        raw_by_offset = {(m.partition, m.offset): m for m in batch}
        for dl in dead:
            raw = raw_by_offset.get((dl.source_partition, dl.source_offset))
            if raw is not None and dl.value is None:
                dl = DeadLetter(**{**dl.__dict__, "key": raw.key, "value": raw.value})
            await self.publisher.send(self.config.topic_dead_letter, dl.key, encode_dead_letter(dl))
            log.warning(
                "dead letter %s at %s:%d: %s",
                dl.reason_code,
                self.config.topic_records,
                dl.source_offset,
                dl.reason,
            )
        for nr in plan.records:
            if nr.revision_conflict:
                ev = nr.incoming.event
                notes.append(
                    ObservabilityEvent(
                        "revision_conflict",
                        ev.scope.session_id,
                        ev.scope.run_id or "",
                        ev.scope.instance_id or "",
                        now,
                        "",
                        decision="appended",
                        values={
                            "expected_revision": float(ev.expected_revision or 0),
                            "thread_revision": float((nr.instance_sequence or 1) - 1),
                        },
                    )
                )
        for note in notes:
            await self.publisher.send(
                self.config.topic_observability,
                note.session_id.encode(),
                encode_observability(note),
            )
        for req in requests:
            await self.publisher.send(
                self.config.topic_compaction_requests,
                req.session_id.encode(),
                encode_compaction_request(req),
            )
        await self.publisher.flush()
        result.committed = len(plan.records)
        result.duplicates = len(plan.duplicates)
        result.dead_letters = len(dead)
        return result

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
        await _grow_view_tokens(conn, part, states)
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
        blob_counts = await ingest.blob_tokens(conn, refs) if refs else {}
        out: list[Incoming] = []
        for msg, obj in decoded:
            text = token_text(obj)
            if text is None:
                found = blob_counts.get(obj.content.ref or "")
                if found is None:
                    # R3.4: large content is stored first; a dangling reference is bad input.
                    dead.append(
                        self._dead(
                            msg,
                            "blob_missing",
                            f"content ref {obj.content.ref} is not stored",
                            obj.scope.session_id,
                            obj.event_key,
                        )
                    )
                    continue
                tokens, method = found
            else:
                tokens, method = self.counter.count_keyed(text_key(text), text), self.counter.method
            out.append(Incoming(obj, msg.partition, msg.offset, tokens, method))
        return out

    def _dead(
        self, msg: RawMessage, code: str, reason: str, session_id: str | None, event_key: str | None
    ) -> DeadLetter:
        return DeadLetter(
            reason_code=code,
            reason=reason,
            source_topic=self.config.topic_records,
            source_partition=msg.partition,
            source_offset=msg.offset,
            key=msg.key,
            value=msg.value,
            session_id=session_id,
            event_key=event_key,
            failed_at_ms=int(time.time() * 1000),
        )

    async def _send_committed(self, rec: CommittedRecord) -> None:
        await self.publisher.send(
            self.config.topic_committed, rec.session_id.encode(), encode_committed(rec)
        )


def build_processor(settings: Settings, pool: asyncpg.Pool, publisher: Publisher) -> BatchProcessor:
    """The one place a processor is wired from settings, whichever driver feeds it."""
    counter = CachedCounter(make_counter("cl100k_base", settings.tiktoken_file))
    return BatchProcessor(
        pool,
        publisher,
        counter,
        ProcessorConfig(
            consumer=settings.processor_id,
            topic_records=settings.topic_records,
            topic_committed=settings.topic_committed,
            topic_dead_letter=settings.topic_dead_letter,
            topic_compaction_requests=settings.topic_compaction_requests,
            topic_observability=settings.topic_observability,
        ),
    )


CRASH_EXIT_CODE = 70


async def handle_or_exit(proc: BatchProcessor, batch: list[RawMessage], attempts: int = 5) -> None:
    """Handle a batch, retrying transient failures; then exit the process at once.

    Exiting (rather than raising) is deliberate: faust's ``take_events`` acks a batch in a
    ``finally`` even when the loop body raises, so an exception could let its offsets be
    committed. A dead process commits nothing; the batch is redelivered after restart,
    and redelivery is a no-op for whatever did commit.
    """
    delay = 0.2
    for attempt in range(1, attempts + 1):
        try:
            result = await proc.handle(batch)
            log.info(
                "batch of %d: committed=%d duplicates=%d dead_letters=%d rejected=%d",
                len(batch),
                result.committed,
                result.duplicates,
                result.dead_letters,
                result.rejected,
            )
            return
        except Exception:
            log.exception("batch of %d failed (attempt %d/%d)", len(batch), attempt, attempts)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
    log.critical("giving up on batch: exiting so that it is redelivered after restart")
    logging.shutdown()
    os._exit(CRASH_EXIT_CODE)


def _in_offset_order(
    incoming: list[Incoming], controls: list[tuple[int, int, ControlEvent]]
) -> list[Incoming | ControlEvent]:
    keyed: list[tuple[int, int, Incoming | ControlEvent]] = [
        (i.partition, i.offset, i) for i in incoming
    ]
    keyed += controls
    keyed.sort(key=lambda t: (t[0], t[1]))
    return [t[2] for t in keyed]


# Records that render nothing in a view (lifecycle markers).
_INVISIBLE = frozenset({"run_started", "run_resumed", "run_finished"})
_ENVELOPE = 4  # per message; the next observation resyncs any drift


async def _grow_view_tokens(
    conn: asyncpg.Connection, plan: BatchPlan, states: dict[str, SessionState]
) -> None:
    """Keep each session's main-view estimate current from the counts just stored."""
    grow: dict[str, int] = {}
    for nr in plan.records:
        ev = nr.incoming.event
        if str(ev.kind) in _INVISIBLE:
            continue
        st = states[ev.scope.session_id]
        run = st.runs.get(ev.scope.run_id or "")
        if ev.scope.instance_id is not None and (
            run is None or run.main_instance_id != ev.scope.instance_id
        ):
            continue  # child threads have views of their own
        grow[st.session_id] = grow.get(st.session_id, 0) + nr.incoming.token_count + _ENVELOPE
    if grow:
        # One statement for the whole batch: most sessions have no compaction state yet
        # (no prepare seen), and a per-session UPDATE would cost a round trip each.
        sids, tokens = zip(*sorted(grow.items()), strict=True)
        await conn.execute(
            "UPDATE compaction_state c SET view_tokens = c.view_tokens + d.t"
            " FROM unnest($1::text[], $2::bigint[]) AS d(sid, t)"
            " WHERE c.session_id = d.sid AND c.lineage = 'main'",
            list(sids),
            list(tokens),
        )
