"""The session processor's batch handler, independent of faust so that it can be driven
and tested directly. Three steps:

1. *decode* (``streams.admission``): bytes → validated, token-counted items; what fails
   is dead-lettered before any SQL.
2. *transact*: one PostgreSQL transaction over the items (plan the records, decide the
   control events, write both and the tracking rows) returning an ``Effects`` value —
   everything to publish, already encoded.
3. *publish* the effects, and wait until every message is acknowledged.

Offsets are committed by the caller only after ``handle`` returns, i.e. after both the
database commit and the publishes were acknowledged. A crash anywhere before that means
redelivery, and redelivery is a no-op (unique keys + tracking rows).

No record stops the partition: whatever fails the transaction is isolated
by bisecting the batch and dead-lettered, and the rest commits once. Only infrastructure
loss (``streams.faults.is_transient``) is raised; the drivers call ``handle`` through
``streams.crash_only.handle_or_exit``, which retries it and past its bound ends the
process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from domain.context.tokens import CachedCounter
from domain.planning.batch import plan_batch
from domain.planning.state import BatchPlan, Incoming
from schemas.contracts import ConstraintPayload, RecordKind
from schemas.wire import CompactionRequest, DeadLetter, ObservabilityEvent
from storage.processor_store import ProcessingStore, ProcessingStores
from storage.records.frontier import RETIRED
from storage.records.outcomes import RefusedEvent
from storage.records.session_states import ExistingRecord
from streams.admission import Admission, Admitted, Control, Item, RawMessage, record_refusals
from streams.control import after_batch, apply_controls
from streams.envelopes import Authenticator
from streams.faults import describe_failure, is_transient
from streams.kafka.publish import Publisher
from streams.outgoing import Effects, ProcessorConfig, encode_applied, messages

__all__ = ["BatchProcessor", "BatchResult", "Control", "Item", "RawMessage"]

log = logging.getLogger("agentloom.processor")


@dataclass
class BatchResult:
    committed: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    rejected: int = 0
    isolated: int = 0  # records the batch transaction could not apply (dead-lettered)
    codes: dict[str, int] = field(default_factory=dict)


class BatchProcessor:
    def __init__(
        self,
        stores: ProcessingStores,
        publisher: Publisher,
        counter: CachedCounter,
        config: ProcessorConfig,
        auth: Authenticator,
    ) -> None:
        self.stores = stores
        self.publisher = publisher
        self.config = config
        self.admission = Admission(counter, config, auth)

    def first_chunk(self, batch: list[RawMessage]) -> list[RawMessage]:
        return _chunks(batch, self.config.pipeline_chunk)[0]

    async def admit_ahead(self, batch: list[RawMessage]) -> Admitted:
        """The admission of ``batch``'s first chunk, before the batch ahead of it has been
        applied (streams.drivers.worker reads one batch ahead). Safe: decoding, validation and
        counting read no state an earlier batch writes — only content blobs, which are
        stored before any event refers to them (R3.4) — and sessions are checked when
        the chunk applies (``Admission.known``)."""
        async with self.stores.acquire() as reads:
            return await self.admission.admit(reads, self.first_chunk(batch))

    async def handle(self, batch: list[RawMessage], ahead: Admitted | None = None) -> BatchResult:
        """Apply ``batch``; raise only for a transient (infrastructure) failure, or when
        a publish fails — then nothing may be acknowledged and the batch is redelivered.
        ``ahead``: ``admit_ahead(batch)``, if it was admitted already.

        No record can fail the batch (R3.3, R15.3): what does not decode or validate is
        dead-lettered before any SQL, and if the batch transaction still fails for
        another reason, the batch is bisected until the records it cannot apply are
        isolated — dead-lettered with the reason — while every other record commits
        exactly once (each part in its own transaction)."""
        effects = Effects()
        chunks = _chunks(batch, self.config.pipeline_chunk)
        async with contextlib.AsyncExitStack() as held:
            store = await held.enter_async_context(self.stores.acquire())
            # A second connection only when decoding overlaps a transaction: a batch of
            # one chunk (steady state: a few events) decodes before it applies.
            reads = (
                await held.enter_async_context(self.stores.acquire()) if len(chunks) > 1 else store
            )
            admitted = ahead if ahead is not None else await self.admission.admit(reads, chunks[0])
            for i, chunk in enumerate(chunks):
                # Pipelined: chunk i's transaction and publishes run while
                # chunk i+1 is decoded — PostgreSQL and the broker work on the other core
                # while this one decodes. Chunks apply one after another, in offset order.
                applying = asyncio.create_task(self._apply(store, chunk, admitted))
                try:
                    if i + 1 < len(chunks):
                        admitted = await self.admission.admit(reads, chunks[i + 1])
                finally:
                    effects.add(await applying)
        await self.publisher.flush()
        return BatchResult(
            effects.records,
            effects.duplicates,
            len(effects.dead),
            effects.rejected,
            effects.isolated,
            effects.codes,
        )

    async def _apply(
        self, store: ProcessingStore, chunk: list[RawMessage], admitted: Admitted
    ) -> Effects:
        """Commit one chunk and send what it produced (acknowledged by the batch's flush).
        Control events are checked against the open sessions here, not when decoded:
        an earlier chunk of the same batch may have opened their session."""
        admitted = await self.admission.known(store, admitted)
        effects = await self.transact(store, admitted, _offsets_of(chunk))
        await self.publish(chunk, effects)
        return effects

    async def transact(
        self, store: ProcessingStore, admitted: Admitted, offsets: dict[int, int]
    ) -> Effects:
        """Apply the items; return what to publish (nothing is published here)."""
        effects = Effects(dead=await record_refusals(store, admitted))
        items = admitted.items
        try:
            try:
                effects.add(await self._attempt(store, items, offsets, careful=False))
            except Exception as exc:
                if is_transient(exc):
                    raise
                # Again with a savepoint around each control event and the pre-emptive
                # check: what fails there is undone alone and the rest commits.
                log.warning("batch of %d failed (%r): applying it again", len(items), exc)
                effects.add(await self._attempt(store, items, offsets))
            return effects
        except Exception as exc:
            if is_transient(exc):
                raise
            log.warning("batch of %d failed (%r): isolating what fails", len(items), exc)
            parts, bad = await self._isolate(store, items, exc)
            await self._finish_isolated(store, bad, offsets)
        isolated = Effects(isolated=len(bad))
        for item, error in bad:
            code, reason = describe_failure(error)
            isolated.dead.append(self.admission.dead_item(item, code, reason))
            isolated.count({code: 1})
        effects.add(isolated)
        for part in parts:
            effects.add(part)
        return effects

    async def publish(self, batch: list[RawMessage], effects: Effects) -> None:
        """Send what the transactions committed. ``handle`` then waits for every
        acknowledgement (``flush``): only then may the caller commit the offsets."""
        originals = {(m.partition, m.offset): (m.key, m.value) for m in batch}
        await self.publisher.send_many(messages(self.config, effects, originals))

    async def _attempt(
        self,
        store: ProcessingStore,
        items: list[Item],
        offsets: dict[int, int],
        careful: bool = True,
    ) -> Effects:
        """One transaction over ``items`` (in offset order); everything to publish is
        encoded inside it, so that not even an encoding error can follow a commit.
        ``careful``: each control event and the pre-emptive check in a savepoint, what
        fails there undone alone; without, the first failure fails the transaction
        (``transact`` then applies the batch again, carefully: no savepoint's two round
        trips while nothing fails)."""
        plan = BatchPlan()
        existing: dict[tuple[str, str], ExistingRecord] = {}
        requests: list[CompactionRequest] = []
        notes: list[ObservabilityEvent] = []
        failed: list[DeadLetter] = []
        async with store.transaction():
            # Each session's records and control events in offset order: a budget check
            # must see its session's counters as they were when Prepare observed, not
            # those of later records that happen to share its batch. A session's state is
            # its own, so other sessions' records wait and are applied together (each
            # application costs round trips: split at every observation, they doubled).
            chunk: list[Incoming] = []
            waiting: set[str] = set()  # the sessions with records in ``chunk``
            for item in items:
                if isinstance(item, Incoming):
                    chunk.append(item)
                    waiting.add(item.event.scope.session_id)
                    continue
                if item.event.session_id in waiting:
                    await self._apply_records(store, chunk, plan, existing)
                    chunk, waiting = [], set()
                applied = await apply_controls(store, [item.event], isolate=careful)
                requests += applied.requests
                notes += applied.observability
                failed += [
                    self.admission.dead_item(item, f.code, f.reason) for f in applied.failures
                ]
            await self._apply_records(store, chunk, plan, existing, offsets)
            touched, again = sorted(plan.touched_sessions), plan.redelivered_sessions
            more, seen = await after_batch(store, touched, again, careful)
            requests, notes = requests + more, notes + seen
            out = encode_applied(self.config, plan, existing, notes, requests)
        out.dead += failed
        return out

    async def _isolate(
        self, store: ProcessingStore, items: list[Item], failure: BaseException
    ) -> tuple[list[Effects], list[tuple[Item, BaseException]]]:
        """Bisect a failed batch, in offset order: a part that commits is done (once), a
        part that fails is split again, down to the single items that fail alone."""
        parts: list[Effects] = []
        bad: list[tuple[Item, BaseException]] = []
        todo: list[tuple[list[Item], BaseException | None]] = [(items, failure)]
        while todo:
            part, error = todo.pop(0)
            if error is None:
                try:
                    parts.append(await self._attempt(store, part, _offsets_of(part)))
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
        store: ProcessingStore,
        bad: list[tuple[Item, BaseException]],
        offsets: dict[int, int],
    ) -> None:
        """The batch is consumed: its offsets pass the isolated records, and each one's
        key is remembered as dead-lettered (so a caller waiting for it, like Prepare's
        run start, gets an answer, and a redelivery stays refused)."""
        async with store.transaction():
            for item, exc in bad:
                if not isinstance(item, Incoming):
                    continue
                s, key = item.event.scope, item.event.event_key
                refused = RefusedEvent(
                    s.session_id, key, *describe_failure(exc), s.space_id, s.actor_id,
                    source=(item.partition, item.offset),
                )  # fmt: skip
                try:
                    async with store.transaction():  # best effort: a savepoint
                        await store.record_refusals([refused])
                except Exception as failure:
                    if is_transient(failure):
                        raise
                    log.warning("outcome of offset %d not recorded: %r", item.offset, failure)
            await store.write_offsets(self.config.consumer, self.config.topic_records, offsets)

    async def _apply_records(
        self,
        store: ProcessingStore,
        chunk: list[Incoming],
        plan: BatchPlan,
        existing: dict[tuple[str, str], ExistingRecord],
        offsets: dict[int, int] | None = None,
    ) -> None:
        """``chunk`` planned and written with ``offsets``' tracking rows (alone if empty)."""
        cfg = self.config
        if not chunk:
            return await store.write_offsets(cfg.consumer, cfg.topic_records, offsets or {})
        keys: dict[str, set[str]] = defaultdict(set)
        ops: dict[str, set[tuple[str, str]]] = defaultdict(set)
        scopes: dict[str, set[tuple[str, str | None]]] = defaultdict(set)
        for inc in chunk:
            scope = inc.event.scope
            keys[scope.session_id].add(inc.event.event_key)
            if inc.event.operation_id:
                ops[scope.session_id].add((inc.event.operation_id, str(inc.event.kind)))
            elif inc.event.kind is RecordKind.CONSTRAINT_RETIRED and isinstance(
                inc.event.payload, ConstraintPayload
            ):  # the id it retires must have been set
                ops[scope.session_id].add((inc.event.payload.constraint_id, RETIRED))
            if scope.run_id is not None:  # the runs and threads planning will look up
                scopes[scope.session_id].add((scope.run_id, scope.instance_id))
        states, found = await store.load_states(keys, ops, scopes)
        part = plan_batch(chunk, states)
        await store.write_records(part, states, cfg.consumer, cfg.topic_records, offsets)
        existing.update(found)
        plan.touched_sessions |= part.touched_sessions
        plan.records += part.records
        plan.duplicates += part.duplicates
        plan.rejections += part.rejections
        plan.letters_again += part.letters_again


def _chunks(batch: list[RawMessage], size: int) -> list[list[RawMessage]]:
    """``batch`` cut in order into parts of at most ``size`` (at least one, maybe empty)."""
    return [batch[i : i + size] for i in range(0, len(batch), size)] or [batch]


def _offsets_of(items: list[RawMessage] | list[Item]) -> dict[int, int]:
    """Tracking rows: the next offset per partition. For a part of a bisected batch, only
    as far as the part goes, so that a reader waiting for a later record does not wake
    before it commits."""
    out: dict[int, int] = {}
    for item in items:
        out[item.partition] = max(out.get(item.partition, 0), item.offset + 1)
    return out
