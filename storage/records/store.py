"""The session processor's port to PostgreSQL, by caller: ``IngestStore`` (what a batch
of records reads and writes) and ``ControlStore`` (what control decisions read and
write, ``streams.control``); ``ProcessingStore`` is both, over one connection and one
transaction per batch. The adapters: ``PgIngestStore`` here and
``storage.compaction.control.PgControlStore``. The processor's orchestration depends only on
the ports, so unit tests run it on an in-memory fake (``tests/unit/fakes/processor.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

import asyncpg

from domain.compaction.control import ControlEffects, ObservationInputs
from domain.compaction.outcome import OutcomeInputs
from domain.compaction.preemption import PreemptCandidate
from domain.context.rendering import RecordView
from domain.planning import BatchPlan, SessionState
from schemas.contracts import ResourceActivationPayload
from schemas.wire import BudgetObservation, CompactionOutcome, ControlEvent
from storage.compaction import summaries as compaction
from storage.compaction.control import GainSettings, PgControlStore
from storage.compaction.state import Checked
from storage.compaction.view_state import ViewState
from storage.records import ingest, outcomes
from storage.records.ingest import ExistingRecord
from storage.records.outcomes import RefusedEvent


class IngestStore(Protocol):
    """What a batch of records reads and writes, in a transaction the processor opens.
    A nested ``transaction`` is a savepoint: what fails in it is undone alone."""

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """A transaction, or a savepoint inside one."""

    async def open_sessions(self, session_ids: list[str]) -> set[str]:
        """The ids among ``session_ids`` that name an existing session."""

    async def blob_tokens(
        self, refs: list[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str, int]]:
        """(space_id, sha256) -> (token_count, token_method, length) of the blobs each
        space stored (a space reads only its own)."""

    async def load_states(
        self,
        keys: dict[str, set[str]],
        operations: dict[str, set[tuple[str, str]]],
        scopes: dict[str, set[tuple[str, str | None]]],
    ) -> tuple[dict[str, SessionState], dict[tuple[str, str], ExistingRecord]]:
        """Lock and load the sessions of a batch and the records it already committed,
        with only the runs and threads the batch names (``scopes``)."""

    async def write_records(
        self, plan: BatchPlan, states: dict[str, SessionState], consumer: str, topic: str
    ) -> None:
        """Write a planned part of a batch: records, runs, threads, outcomes, the view
        estimate and resource (de)activations (R11.8)."""

    async def write_offsets(self, consumer: str, topic: str, offsets: dict[int, int]) -> None:
        """The tracking rows: the batch is consumed up to ``offsets`` (effectively-once)."""

    async def record_refusals(self, refusals: Sequence[RefusedEvent]) -> set[tuple[str, str]]:
        """Remember why events were refused, each under its session only when that
        session is of the event's own space and actor (``storage.records.outcomes``);
        the (session_id, event_key) of those."""


class ControlStore(Protocol):
    """What the control decisions of a batch read and write (``streams.control``), each
    in a savepoint of the batch's transaction."""

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """A savepoint inside the batch's transaction."""

    async def checked(self, session_id: str, event_key: str) -> Checked | None:
        """An observation already checked, and the job it started."""

    async def observation_inputs(
        self, ev: ControlEvent, obs: BudgetObservation
    ) -> ObservationInputs:
        """Lock the lineage's compaction state; the facts an observation is decided on."""

    async def task_version(
        self, session_id: str, lineage: str, run_id: str, instance_id: str, through: int
    ) -> int:
        """R11.6: the task version a job starting now depends on."""

    async def frontier_versions(
        self, session_id: str, lineage: str, run_id: str, instance_id: str
    ) -> tuple[int, int]:
        """R11.6: the plan and constraint versions a job starting now depends on."""

    async def outcome_inputs(self, ev: ControlEvent, out: CompactionOutcome) -> OutcomeInputs:
        """The job of an outcome and, while it is in flight, what its commit depends on."""

    async def apply_control(self, effects: ControlEffects) -> None:
        """Write what a control decision decided."""

    async def preempt_candidates(self, session_ids: list[str]) -> list[PreemptCandidate]:
        """Main lineages of ``session_ids`` due a pre-emptive check."""

    async def main_view(self, session_id: str, run_id: str) -> ViewState:
        """The compaction view of a run's main thread."""

    async def main_instance_id(self, session_id: str, run_id: str) -> str | None:
        """The instance id of a run's main thread."""

    async def view_records(
        self,
        session_id: str,
        run_id: str,
        main_instance_id: str,
        through: int,
        covered: frozenset[str] = frozenset(),
    ) -> list[RecordView]:
        """A run's main view: inherited records, then its main thread's, in order;
        inherited ones in ``covered`` (its summary's) may be left out."""


class ProcessingStore(IngestStore, ControlStore, Protocol):
    """Both, over the batch's one connection."""


class PgIngestStore:
    """``IngestStore`` over one asyncpg connection."""

    conn: asyncpg.Connection

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        tx: AbstractAsyncContextManager[Any] = self.conn.transaction()
        return tx

    async def load_states(
        self,
        keys: dict[str, set[str]],
        operations: dict[str, set[tuple[str, str]]],
        scopes: dict[str, set[tuple[str, str | None]]],
    ) -> tuple[dict[str, SessionState], dict[tuple[str, str], ExistingRecord]]:
        return await ingest.load_states(self.conn, keys, operations, scopes)

    async def write_records(
        self, plan: BatchPlan, states: dict[str, SessionState], consumer: str, topic: str
    ) -> None:
        await ingest.write_plan(self.conn, plan, states, consumer, topic, {})
        await ingest.grow_view_tokens(self.conn, plan, states)
        for nr in plan.records:  # resource (de)activations: R11.8 revocation
            p = nr.incoming.event.payload
            if isinstance(p, ResourceActivationPayload):
                await compaction.set_resource_state(
                    self.conn,
                    nr.incoming.event.scope.session_id,
                    p.resource_id,
                    p.active,
                    nr.session_sequence,
                )

    async def write_offsets(self, consumer: str, topic: str, offsets: dict[int, int]) -> None:
        await ingest.write_offsets(self.conn, consumer, topic, offsets)

    async def open_sessions(self, session_ids: list[str]) -> set[str]:
        """The ids among ``session_ids`` that name an existing session."""
        conn = self.conn
        rows = await conn.fetch(
            "SELECT session_id FROM sessions WHERE session_id = ANY($1::text[])", session_ids
        )
        return {r["session_id"] for r in rows}

    async def blob_tokens(
        self, refs: list[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str, int]]:
        """(space_id, sha256) -> (token_count, token_method, length) of the blobs among
        ``refs`` that their space stored (another space's hash is absent, found by
        the same key lookup as a hash nobody stored)."""
        conn = self.conn
        rows = await conn.fetch(
            "SELECT b.space_id, b.sha256, b.token_count, b.token_method, b.length FROM blobs b"
            " JOIN unnest($1::text[], $2::text[]) AS q(space_id, sha256)"
            " ON b.space_id = q.space_id AND b.sha256 = q.sha256",
            [space for space, _ in refs],
            [sha for _, sha in refs],
        )
        return {
            (r["space_id"], r["sha256"]): (r["token_count"], r["token_method"], r["length"])
            for r in rows
        }

    async def record_refusals(self, refusals: Sequence[RefusedEvent]) -> set[tuple[str, str]]:
        return await outcomes.record_refusals(self.conn, refusals)


class PgProcessingStore(PgIngestStore, PgControlStore):
    """``ProcessingStore`` over one asyncpg connection."""

    def __init__(self, conn: asyncpg.Connection, gain: GainSettings | None = None) -> None:
        self.conn = conn
        self.gain = gain or GainSettings()


class PgProcessing:
    """Connections of a pool as ``ProcessingStore``s (what the processor is given).
    ``gain``: what the gain check of a ratio-started job weighs of the deployment (its
    summarizer and model profiles, ``domain.compaction.gain``)."""

    def __init__(self, pool: asyncpg.Pool, gain: GainSettings | None = None) -> None:
        self.pool = pool
        self.gain = gain or GainSettings()

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[ProcessingStore]:
        async with self.pool.acquire() as conn:
            yield PgProcessingStore(conn, self.gain)


class ProcessingStores(Protocol):
    """Where the processor gets a ``ProcessingStore`` (a pooled connection) per batch."""

    def acquire(self) -> AbstractAsyncContextManager[ProcessingStore]:
        """A store for one batch; released when the block ends."""
