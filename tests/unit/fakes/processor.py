"""An in-memory ``storage.records.store.ProcessingStore`` for unit tests of the session
processor's orchestration (issue 11).

The records side is a small database: sessions (``SessionState``), committed records,
refused/dead-lettered keys and tracking offsets, with transactions that really roll back
(a snapshot taken at ``transaction()`` is restored when its block raises, so a savepoint
undoes only its own part). ``poison_keys`` makes any write that contains one of those
event keys fail, as a storage refusal would. The control side returns the facts a test
configured (``observations``, ``outcomes``, ...) and keeps the effects it was asked to
apply (``data.applied``).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from domain.compaction.control.effects import ControlEffects, ObservationInputs
from domain.compaction.control.observation import request_of
from domain.compaction.outcome import OutcomeInputs
from domain.compaction.preemption import PreemptCandidate
from domain.context.rendering import RecordView
from domain.planning.state import BatchPlan, DeadLettered, SessionState
from schemas.wire import BudgetObservation, CompactionOutcome, CompactionRequest, ControlEvent
from storage.compaction.state import Checked
from storage.compaction.view_state import ViewState
from storage.processor_store import ProcessingStore
from storage.records.outcomes import NOT_BINDING, UNSCOPED_REFUSALS, RefusedEvent
from storage.records.session_states import ExistingRecord


class InjectedFailure(Exception):
    """What a poisoned write raises (a non-transient failure: isolated, dead-lettered)."""


@dataclass
class Data:
    """What the fake database holds; a transaction that fails restores a copy of it."""

    sessions: dict[str, SessionState] = field(default_factory=dict)
    records: dict[tuple[str, str], ExistingRecord] = field(default_factory=dict)
    operations: set[tuple[str, str, str]] = field(default_factory=set)
    outcomes: dict[tuple[str, str], str] = field(default_factory=dict)  # -> reason code
    dead_lettered: dict[tuple[str, str], DeadLettered] = field(default_factory=dict)
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    checked: dict[tuple[str, str], Checked] = field(default_factory=dict)
    applied: list[ControlEffects] = field(default_factory=list)


@dataclass
class FakeProcessingStore:
    data: Data = field(default_factory=Data)
    blobs: dict[tuple[str, str], tuple[int, str, int]] = field(default_factory=dict)
    poison_keys: set[str] = field(default_factory=set)
    # control facts, configured by a test
    observations: dict[str, ObservationInputs] = field(default_factory=dict)  # by session
    outcomes: dict[str, OutcomeInputs] = field(default_factory=dict)  # by job id
    task_versions: dict[str, int] = field(default_factory=dict)  # by session
    candidates: list[PreemptCandidate] = field(default_factory=list)
    views: dict[tuple[str, str], ViewState] = field(default_factory=dict)
    records_of_view: dict[tuple[str, str], list[RecordView]] = field(default_factory=dict)
    mains: dict[tuple[str, str], str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)  # commit / rollback, in order
    # What was applied, in order: "records <keys>" per write of records, "control <key>"
    # per control decision written.
    steps: list[str] = field(default_factory=list)
    _depth: int = 0

    def add_session(self, state: SessionState) -> None:
        self.data.sessions[state.session_id] = state

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        saved = copy.deepcopy(self.data)
        self._depth += 1
        try:
            yield
        except BaseException:
            self.data = saved
            self.log.append("rollback")
            raise
        else:
            self.log.append("commit" if self._depth == 1 else "release")
        finally:
            self._depth -= 1

    async def open_sessions(self, session_ids: list[str]) -> set[str]:
        return {s for s in session_ids if s in self.data.sessions}

    async def blob_tokens(
        self, refs: list[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str, int]]:
        return {r: self.blobs[r] for r in refs if r in self.blobs}

    async def load_states(
        self,
        keys: dict[str, set[str]],
        operations: dict[str, set[tuple[str, str]]],
        scopes: dict[str, set[tuple[str, str | None]]],
    ) -> tuple[dict[str, SessionState], dict[tuple[str, str], ExistingRecord]]:
        # As PostgreSQL loads them: only the runs and threads the batch names in
        # ``scopes`` (planning must not depend on any other).
        states: dict[str, SessionState] = {}
        existing: dict[tuple[str, str], ExistingRecord] = {}
        for sid in sorted(keys):
            if sid not in self.data.sessions:
                continue
            st = copy.deepcopy(self.data.sessions[sid])
            named = scopes.get(sid, set())
            st.runs = {r: v for r, v in st.runs.items() if any(r == n for n, _ in named)}
            st.threads = {t: v for t, v in st.threads.items() if t in named}
            for key in keys[sid]:
                if (sid, key) in self.data.records:
                    existing[(sid, key)] = self.data.records[(sid, key)]
                    st.known_keys.add(key)
                if not self._unbound((sid, key)):
                    st.known_keys.add(key)  # refused/dead-lettered keys stay refused
                if (sid, key) in self.data.dead_lettered:
                    st.dead_lettered[key] = self.data.dead_lettered[(sid, key)]
            for op, kind in operations.get(sid, ()):
                if (sid, op, kind) in self.data.operations:
                    st.known_operations.add((op, kind))
            # Issue 24: as storage.records.frontier loads them, only when the batch retires one.
            if not any(k == "constraint_retired" for _, k in operations.get(sid, ())):
                st.constraint_ids = set()
            states[sid] = st
        return states, existing

    async def write_records(
        self,
        plan: BatchPlan,
        states: dict[str, SessionState],
        consumer: str,
        topic: str,
        offsets: dict[int, int] | None = None,
    ) -> None:
        keys = {nr.incoming.event.event_key for nr in plan.records}
        keys |= {r.incoming.event.event_key for r in plan.rejections}
        if keys & self.poison_keys:
            raise InjectedFailure(f"injected failure for {sorted(keys & self.poison_keys)}")
        self.steps.append("records " + " ".join(nr.incoming.event.event_key for nr in plan.records))
        for nr in plan.records:
            ev = nr.incoming.event
            sid = ev.scope.session_id
            self.data.records[(sid, ev.event_key)] = ExistingRecord(
                nr.record_id,
                sid,
                nr.session_sequence,
                ev.scope.run_id,
                ev.scope.instance_id,
                nr.instance_sequence,
                ev.event_key,
                str(ev.kind),
                nr.incoming.token_count,
                nr.incoming.token_method,
                ev.content.sha256,
            )
            if ev.operation_id:
                self.data.operations.add((sid, ev.operation_id, str(ev.kind)))
        for rej in plan.rejections:
            key = (rej.incoming.event.scope.session_id, rej.incoming.event.event_key)
            if rej.code not in UNSCOPED_REFUSALS and self._unbound(key):
                self.data.outcomes[key] = rej.code
                if rej.dead_letter:
                    at = (rej.incoming.partition, rej.incoming.offset)
                    self.data.dead_lettered[key] = DeadLettered(rej.code, rej.message, *at)
        for sid, st in states.items():
            # Runs and threads are upserted, as in PostgreSQL: those the batch did not
            # load stay as they were.
            old = self.data.sessions.get(sid)
            runs = {**old.runs, **st.runs} if old else st.runs
            threads = {**old.threads, **st.threads} if old else st.threads
            self.data.sessions[sid] = replace(
                st, runs=runs, threads=threads, known_keys=set(), known_operations=set()
            )
        await self.write_offsets(consumer, topic, offsets or {})

    async def write_offsets(self, consumer: str, topic: str, offsets: dict[int, int]) -> None:
        for partition, offset in offsets.items():
            key = (consumer, topic, partition)
            self.data.offsets[key] = max(self.data.offsets.get(key, 0), offset)

    async def record_refusals(self, refusals: Sequence[RefusedEvent]) -> set[tuple[str, str]]:
        own = set()
        for r in refusals:
            st = self.data.sessions.get(r.session_id)
            if st is None or (st.space_id, st.actor_id) != (r.space_id, r.actor_id):
                continue
            key = (r.session_id, r.event_key)
            own.add(key)
            if self._unbound(key):
                self.data.outcomes[key] = r.code
                if r.outcome == "dead_letter" and r.source is not None:
                    self.data.dead_lettered[key] = DeadLettered(r.code, r.message, *r.source)
        return own

    def _unbound(self, key: tuple[str, str]) -> bool:
        """No refusal recorded for ``key`` yet, or only one that binds nothing (an
        authentication refusal gives way: storage.records.outcomes)."""
        return self.data.outcomes.get(key) in (None, *NOT_BINDING)

    async def observation_inputs(
        self, ev: ControlEvent, obs: BudgetObservation
    ) -> ObservationInputs | Checked:
        done = self.data.checked.get((ev.session_id, ev.event_key))
        if done is not None:
            return done
        return replace(self.observations[ev.session_id], event=ev, observation=obs)

    async def task_version(
        self, session_id: str, lineage: str, run_id: str, instance_id: str, through: int
    ) -> int:
        return self.task_versions.get(session_id, 0)

    async def frontier_versions(
        self, session_id: str, lineage: str, run_id: str, instance_id: str
    ) -> tuple[int, int]:
        return 0, 0

    async def outcome_inputs(self, ev: ControlEvent, out: CompactionOutcome) -> OutcomeInputs:
        found = self.outcomes.get(out.job_id)
        if found is None:
            return OutcomeInputs(ev, out, None)
        return replace(found, event=ev, outcome=out)

    async def apply_control(self, effects: ControlEffects) -> None:
        if effects.report is not None and effects.report.event_key in self.poison_keys:
            raise InjectedFailure(f"injected failure for {effects.report.event_key}")
        self.data.applied.append(effects)
        if (report := effects.report) is not None:
            self.steps.append(f"control {report.event_key}")
            job = effects.new_job
            request: dict[str, Any] | None = None
            if job is not None:
                request = {
                    **job.request.__dict__,
                    "trigger_reasons": list(job.request.trigger_reasons),
                }
            status = None if job is None else "requested"
            self.data.checked[(effects.session_id, report.event_key)] = Checked(
                report.job_id if job is not None else None, status, request
            )

    async def waiting_requests(self, session_ids: list[str]) -> list[CompactionRequest]:
        """The requests of the jobs started here (``apply_control``) that no outcome
        finished: this fake never finishes one."""
        return [
            request_of(c.job_request)
            for (sid, _), c in self.data.checked.items()
            if sid in session_ids and c.job_status == "requested" and c.job_request is not None
        ]

    async def preempt_candidates(self, session_ids: list[str]) -> list[PreemptCandidate]:
        return [c for c in self.candidates if c.session_id in session_ids]

    async def main_view(self, session_id: str, run_id: str) -> ViewState:
        return self.views[(session_id, run_id)]

    async def main_instance_id(self, session_id: str, run_id: str) -> str | None:
        return self.mains.get((session_id, run_id))

    async def view_records(
        self,
        session_id: str,
        run_id: str,
        main_instance_id: str,
        through: int,
        covered: frozenset[str] = frozenset(),
        epoch: str | None = None,
    ) -> list[RecordView]:
        # Covered records stay in: the decision must ignore them itself.
        return list(self.records_of_view.get((session_id, run_id), []))

    def committed_keys(self) -> list[str]:
        """Event keys of the committed records, in session order."""
        found = sorted(self.data.records.values(), key=lambda r: r.session_sequence)
        return [r.event_key for r in found]


@dataclass
class FakeProcessing:
    """``ProcessingStores`` over one fake store (a single connection)."""

    store: FakeProcessingStore = field(default_factory=FakeProcessingStore)

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[ProcessingStore]:
        yield self.store
