"""The session processor's port to PostgreSQL, by caller: ``IngestStore`` (what a batch
of records reads and writes, ``storage.records.store``) and ``ControlStore`` (what control
decisions read and write, ``streams.control``); ``ProcessingStore`` is both, over one
connection and one transaction per batch. The adapters: ``PgIngestStore`` and
``storage.compaction.control.PgControlStore``, joined here (above both packages). The
processor's orchestration depends only on the ports, so unit tests run it on an in-memory
fake (``tests/unit/fakes/processor.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

import asyncpg

from domain.compaction.control.effects import ControlEffects, ObservationInputs
from domain.compaction.outcome import OutcomeInputs
from domain.compaction.preemption import PreemptCandidate
from domain.planning.state import BatchPlan, SessionState
from domain.window.record_view import RecordView
from schemas.contracts import ResourceActivationPayload
from schemas.wire import BudgetObservation, CompactionOutcome, CompactionRequest, ControlEvent
from storage.compaction import resource_revocation
from storage.compaction.control import GainSettings, PgControlStore
from storage.compaction.preempt_reads import PgPreemptReads
from storage.compaction.state import Checked
from storage.compaction.view_cache import TxViews, ViewCache
from storage.compaction.view_state import ViewState
from storage.records.store import IngestStore, PgIngestStore


class ControlStore(Protocol):
    """What the control decisions of a batch read and write (``streams.control``), each
    in a savepoint of the batch's transaction."""

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """A savepoint inside the batch's transaction."""

    async def observation_inputs(
        self, ev: ControlEvent, obs: BudgetObservation
    ) -> ObservationInputs | Checked:
        """Lock the lineage's compaction state; the facts an observation is decided on, or
        its earlier check's outcome when it was checked already."""

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

    async def waiting_requests(self, session_ids: list[str]) -> list[CompactionRequest]:
        """The requests of the jobs in flight of ``session_ids``' lineages that no worker
        answered yet."""

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
        epoch: str | None = None,
    ) -> list[RecordView]:
        """A run's main view: inherited records, then its main thread's, in order;
        inherited ones in ``covered`` (its summary's) may be left out. ``epoch``: the
        view's revocation epoch (what was read under it may be kept and continued)."""


class ProcessingStore(IngestStore, ControlStore, Protocol):
    """Both, over the batch's one connection."""


class PgProcessingStore(PgIngestStore, PgControlStore, PgPreemptReads):
    """``ProcessingStore`` over one asyncpg connection. With ``cache`` (the processor's,
    ``storage.compaction.view_cache``), each outermost transaction reads main views
    through it and keeps what it read once it committed."""

    def __init__(
        self,
        conn: asyncpg.Connection,
        gain: GainSettings | None = None,
        cache: ViewCache | None = None,
    ) -> None:
        self.conn = conn
        self.gain = gain or GainSettings()
        self.cache = cache
        self.views = None
        self.probed = {}

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """A transaction, or inside one a savepoint."""
        if self.views is not None or self.cache is None:
            try:
                async with self.conn.transaction():
                    yield
            except BaseException:
                if self.views is not None:
                    self.views.spoil()  # a savepoint undone: keep nothing read in it
                raise
            return
        self.views = TxViews(self.cache)
        try:
            async with self.conn.transaction():
                yield
            self.views.commit()
        finally:
            self.views = None
            self.probed = {}

    async def write_records(
        self,
        plan: BatchPlan,
        states: dict[str, SessionState],
        consumer: str,
        topic: str,
        offsets: dict[int, int] | None = None,
    ) -> None:
        """The records (and ``offsets``' tracking rows), then their resource
        (de)activations: R11.8 revocation withdraws a resource's content and invalidates
        the summaries covering it."""
        await PgIngestStore.write_records(self, plan, states, consumer, topic, offsets)
        if self.views is not None:  # a run's main instance is written once, with the run
            for run in plan.new_runs:
                self.views.mains[(run.session_id, run.run_id)] = run.main_instance_id
        for nr in plan.records:
            sid = nr.incoming.event.scope.session_id
            self.probed.pop(sid, None)
            if self.views is not None:
                self.views.wrote(sid, nr.session_sequence, str(nr.incoming.event.kind))
        for nr in plan.records:
            p = nr.incoming.event.payload
            if isinstance(p, ResourceActivationPayload):
                await resource_revocation.set_resource_state(
                    self.conn,
                    nr.incoming.event.scope.session_id,
                    p.resource_id,
                    p.active,
                    nr.session_sequence,
                )


class PgProcessing:
    """Connections of a pool as ``ProcessingStore``s (what the processor is given).
    ``gain``: what the gain check of a ratio-started job weighs of the deployment (its
    summarizer and model profiles, ``domain.compaction.gain``)."""

    def __init__(self, pool: asyncpg.Pool, gain: GainSettings | None = None) -> None:
        self.pool = pool
        self.gain = gain or GainSettings()
        # Main views between batches: the processor is their sessions' one writer.
        self.cache = ViewCache()

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[ProcessingStore]:
        async with self.pool.acquire() as conn:
            yield PgProcessingStore(conn, self.gain, self.cache)


class ProcessingStores(Protocol):
    """Where the processor gets a ``ProcessingStore`` (a pooled connection) per batch."""

    def acquire(self) -> AbstractAsyncContextManager[ProcessingStore]:
        """A store for one batch; released when the block ends."""
