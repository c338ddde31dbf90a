"""The session processor's port to PostgreSQL (``ProcessingStore``) and its
adapter over asyncpg. The processor's orchestration depends only on the port, so unit
tests run it on an in-memory fake (``tests/unit/fakes/processor.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
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
from storage import compaction, compaction_state, control_store, ingest, processing, threads
from storage.compaction_state import Checked
from storage.ingest import ExistingRecord
from storage.view_state import ViewState


class ProcessingStore(Protocol):
    """The session processor's port to PostgreSQL, one connection: what a batch
    reads and writes, in a transaction the processor opens. A nested ``transaction`` is
    a savepoint: what fails in it is undone alone."""

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

    async def record_dead_letter(
        self,
        session_id: str,
        event_key: str,
        code: str,
        message: str,
        space_id: str,
        actor_id: str,
    ) -> None:
        """Remember that an isolated record was dead-lettered."""

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


class PgProcessingStore:
    """``ProcessingStore`` over one asyncpg connection."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        tx: AbstractAsyncContextManager[Any] = self.conn.transaction()
        return tx

    async def open_sessions(self, session_ids: list[str]) -> set[str]:
        return await processing.open_sessions(self.conn, session_ids)

    async def blob_tokens(
        self, refs: list[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str, int]]:
        return await ingest.blob_tokens(self.conn, refs)

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

    async def record_dead_letter(
        self,
        session_id: str,
        event_key: str,
        code: str,
        message: str,
        space_id: str,
        actor_id: str,
    ) -> None:
        await processing.record_dead_letter(
            self.conn, session_id, event_key, code, message, space_id, actor_id
        )

    async def checked(self, session_id: str, event_key: str) -> Checked | None:
        return await compaction_state.checked(self.conn, session_id, event_key)

    async def observation_inputs(
        self, ev: ControlEvent, obs: BudgetObservation
    ) -> ObservationInputs:
        return await control_store.observation_inputs(self.conn, ev, obs)

    async def task_version(
        self, session_id: str, lineage: str, run_id: str, instance_id: str, through: int
    ) -> int:
        return await control_store.task_version(
            self.conn, session_id, lineage, run_id, instance_id, through
        )

    async def frontier_versions(
        self, session_id: str, lineage: str, run_id: str, instance_id: str
    ) -> tuple[int, int]:
        f = await control_store.frontier_of(self.conn, session_id, lineage, run_id, instance_id)
        return f.plan.version, f.constraints_version

    async def outcome_inputs(self, ev: ControlEvent, out: CompactionOutcome) -> OutcomeInputs:
        return await control_store.outcome_inputs(self.conn, ev, out)

    async def apply_control(self, effects: ControlEffects) -> None:
        await control_store.apply_control(self.conn, effects)

    async def preempt_candidates(self, session_ids: list[str]) -> list[PreemptCandidate]:
        return await compaction_state.preempt_candidates(self.conn, session_ids)

    async def main_view(self, session_id: str, run_id: str) -> ViewState:
        return await control_store.view_of(self.conn, session_id, run_id, "main")

    async def main_instance_id(self, session_id: str, run_id: str) -> str | None:
        return await processing.main_instance_id(self.conn, session_id, run_id)

    async def view_records(
        self,
        session_id: str,
        run_id: str,
        main_instance_id: str,
        through: int,
        covered: frozenset[str] = frozenset(),
    ) -> list[RecordView]:
        # Selection ignores covered records: a long, summarized history is not read again
        # (with its content) on every pre-emptive check.
        inherited = await threads.uncovered_records(self.conn, session_id, through, covered)
        own = await threads.thread_records(self.conn, session_id, run_id, main_instance_id, through)
        return inherited + own


class PgProcessing:
    """Connections of a pool as ``ProcessingStore``s (what the processor is given)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[ProcessingStore]:
        async with self.pool.acquire() as conn:
            yield PgProcessingStore(conn)


class ProcessingStores(Protocol):
    """Where the processor gets a ``ProcessingStore`` (a pooled connection) per batch."""

    def acquire(self) -> AbstractAsyncContextManager[ProcessingStore]:
        """A store for one batch; released when the block ends."""
