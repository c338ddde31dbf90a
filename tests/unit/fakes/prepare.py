"""In-memory fakes of Prepare's ports (``services/prepare/bootstrap.Adapters``), and a
``PrepareWorld`` that wires the real use cases over them through the real bootstrap.

The fakes hold plain dicts and lists: a test arranges the state the session processor
would have written (runs, records, summaries, refusals) and asserts on what Prepare
stored or published. Nothing here decides anything Prepare's own code decides.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from domain.auth import Credential, KeyKind
from domain.compaction.triggers import Counters
from domain.context.rendering import RecordView
from domain.context.tokens import ByteEstimateCounter, CachedCounter
from domain.planning.state import RunState
from domain.policy.context_policy import validate_policy
from domain.window.budget import Calibration
from schemas.answers.sessions import EventOutcome, Session
from services.prepare.assembly.prepare_hooks import HookRegistry
from services.prepare.bootstrap import Adapters, Options, build_service
from services.prepare.service import PrepareService
from storage.api_keys import StoredKey, new_key
from storage.blobs import RecordScope, StoredRecord
from storage.calls.model_calls import Completion, NewCall, Sample, StoredCall, Usage
from storage.calls.prepared_contexts import PreparedRow, StoredPrepared
from storage.compaction.summary_reuse import SummaryRef
from storage.compaction.view import JobStatus
from storage.compaction.view_state import ViewState
from storage.records.threads import Inherited, Snapshot, SummaryView
from storage.releases import RELEASE_CONTENT, Release
from storage.sessions import Refusal
from tests.unit.fakes.publisher import FakePublisher


@dataclass
class FakeReleases:
    rows: dict[str, Release] = field(default_factory=dict)

    async def insert(
        self,
        release_id: str,
        content: dict[str, Any],
        policy_revision: str,
        content_hash: str,
        space_id: str | None,
        overrides: dict[str, Any] | None = None,
    ) -> bool:
        if release_id in self.rows:
            return False
        self.rows[release_id] = Release(
            release_id=release_id,
            **{k: content[k] for k in RELEASE_CONTENT},
            policy_revision=policy_revision,
            content_hash=content_hash,
            space_id=space_id,
            frozen_at=datetime.now(UTC).isoformat(),
            policy=validate_policy(content["context_policy"]),
            policy_overrides=overrides,
        )
        return True

    async def get(self, release_id: str) -> Release | None:
        return self.rows.get(release_id)

    async def backfill_content_hash(self, release_id: str, content_hash: str) -> None:
        rel = self.rows[release_id]
        if rel.content_hash is None:
            self.rows[release_id] = Release(**{**rel.__dict__, "content_hash": content_hash})


@dataclass
class FakeSessions:
    rows: dict[str, Session] = field(default_factory=dict)
    runs: dict[tuple[str, str], RunState] = field(default_factory=dict)
    refusals: dict[tuple[str, str], Refusal] = field(default_factory=dict)
    snapshots: dict[tuple[str, str], Snapshot] = field(default_factory=dict)  # runs'
    outcomes: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    grants: dict[tuple[str, str], tuple[str, str | None]] = field(default_factory=dict)

    async def insert(
        self,
        session_id: str,
        space_id: str,
        actor_id: str,
        release_id: str,
        name: str | None = None,
    ) -> bool:
        name = name or session_id
        taken = any((r.space_id, r.session_name) == (space_id, name) for r in self.rows.values())
        if session_id in self.rows or taken:
            return False
        self.rows[session_id] = Session(
            session_id=session_id,
            space_id=space_id,
            actor_id=actor_id,
            release_id=release_id,
            active_run_id=None,
            revision=0,
            user_turns=0,
            model_steps=0,
            last_sequence=0,
            session_name=name,
        )
        return True

    async def resolve(self, space_id: str, session_id: str) -> Session | None:
        mine = [r for r in self.rows.values() if r.space_id == space_id]
        named = [r for r in mine if r.session_name == session_id]
        return ([r for r in mine if r.session_id == session_id] or named or [None])[0]

    async def get(self, session_id: str) -> Session | None:
        return self.rows.get(session_id)

    async def run(self, session_id: str, run_id: str) -> RunState | None:
        return self.runs.get((session_id, run_id))

    async def refusal(self, session_id: str, event_key: str) -> Refusal | None:
        return self.refusals.get((session_id, event_key))

    async def settled(
        self, session_id: str, run_id: str, event_key: str
    ) -> tuple[Refusal | None, RunState | None]:
        return self.refusals.get((session_id, event_key)), self.runs.get((session_id, run_id))

    async def started(
        self, session_id: str, run_id: str, event_key: str
    ) -> tuple[Refusal | None, Snapshot | None]:
        return self.refusals.get((session_id, event_key)), self.snapshots.get((session_id, run_id))

    async def outcome(self, session_id: str, event_key: str) -> EventOutcome | None:
        found = self.outcomes.get((session_id, event_key))
        return None if found is None else EventOutcome.model_validate(found)

    async def has_grant(self, session_id: str, actor_id: str) -> bool:
        return (session_id, actor_id) in self.grants

    async def add_grant(
        self, session_id: str, actor_id: str, granted_by: str, granted_by_key: str | None
    ) -> None:
        self.grants.setdefault((session_id, actor_id), (granted_by, granted_by_key))

    async def revoke_grant(
        self, session_id: str, actor_id: str, revoked_by: str, revoked_by_key: str | None
    ) -> bool:
        return self.grants.pop((session_id, actor_id), None) is not None


@dataclass
class FakeModelCalls:
    rows: dict[str, StoredCall] = field(default_factory=dict)
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)
    inserted: list[NewCall] = field(default_factory=list)
    reported: list[Usage] = field(default_factory=list)  # what recent_usage returns

    async def for_prepared(
        self, prepared_id: str, session_id: str, run_id: str
    ) -> StoredCall | None:
        for c in self.rows.values():
            if (c.prepared_id, c.session_id, c.run_id) == (prepared_id, session_id, run_id):
                return c
        return None

    async def get(self, call_id: str, session_id: str) -> StoredCall | None:
        c = self.rows.get(call_id)
        return c if c is not None and c.session_id == session_id else None

    async def insert(self, call: NewCall) -> bool:
        if any(c.prepared_id == call.prepared_id for c in self.rows.values()):
            return False
        self.inserted.append(call)
        self.rows[call.call_id] = StoredCall(
            call.call_id,
            call.prepared_id,
            call.session_id,
            call.run_id,
            call.instance_id,
            call.purpose,
            call.model,
            "ready",
            call.final_input_sha256,
            call.budget,
            call.hook_versions,
            call.dependency_versions,
            None,
            provider_format=str(call.model_config.get("provider_format", "")),
        )
        return True

    calibrations: FakeCalibrations | None = None  # the one the claim folds into

    async def complete(
        self, call_id: str, response_sha256: str, usage: dict[str, Any], sample: Sample | None
    ) -> Completion:
        c = self.rows[call_id]
        if c.status != "ready":
            return Completion(False, c.drift)
        drift, cal = None, None
        if sample is not None:
            assert self.calibrations is not None, "PrepareWorld links the calibrations"
            rows = self.calibrations.rows
            key = (sample.space_id, sample.model)
            cal, drift = sample.step(rows.get(key, Calibration()))
            rows[key] = cal
        self.rows[call_id] = StoredCall(**{**c.__dict__, "status": "completed", "drift": drift})
        self.usage[call_id] = usage
        return Completion(True, drift, cal)

    async def recent_usage(self, per_model: int) -> list[Usage]:
        return list(self.reported)


@dataclass
class FakeCalibrations:
    rows: dict[tuple[str, str], Calibration] = field(default_factory=dict)  # (space, model)
    reads: int = 0

    async def get(self, space_id: str, model: str) -> Calibration | None:
        self.reads += 1
        return self.rows.get((space_id, model))

    async def seed(self, space_id: str, model: str, cal: Calibration) -> None:
        self.rows.setdefault((space_id, model), cal)


@dataclass
class FakePreparedContexts:
    rows: dict[str, StoredPrepared] = field(default_factory=dict)
    loads: int = 0
    batches: list[int] = field(default_factory=list)  # rows per save_many

    async def save(
        self,
        prepared_id: str,
        session_id: str,
        run_id: str,
        body: bytes,
        purpose: str | None = None,
        lineage: str | None = None,
    ) -> None:
        self.rows.setdefault(prepared_id, StoredPrepared(prepared_id, session_id, run_id, body))

    async def save_many(self, rows: list[PreparedRow]) -> None:
        self.batches.append(len(rows))
        for r in rows:
            body = r.body
            if r.base_id is not None:  # rebuilt as the real readers do (``BODY``)
                base = self.rows.get(r.base_id)
                if base is None:
                    continue
                assert r.base_bytes is not None
                body = base.body[: r.base_bytes] + r.body
            await self.save(r.prepared_id, r.session_id, r.run_id, body, r.purpose, r.lineage)

    async def load(self, prepared_id: str) -> StoredPrepared | None:
        self.loads += 1
        return self.rows.get(prepared_id)

    async def prune(self, older_than_s: float, batch: int = 5000) -> int:
        gone = len(self.rows)
        self.rows.clear()  # tests prune "everything older than now"
        return gone


@dataclass
class FakeBlobs:
    rows: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (space, sha256)

    async def put(
        self, space_id: str, sha256: str, data: bytes, media_type: str, tokens: int, method: str
    ) -> None:
        self.rows.setdefault((space_id, sha256), data)

    async def text(self, space_id: str, sha256: str) -> str | None:
        data = self.rows.get((space_id, sha256))
        return None if data is None else data.decode()


@dataclass
class FakeRecords:
    rows: dict[tuple[str, str], StoredRecord] = field(default_factory=dict)
    transfers: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)

    async def read(self, session_id: str, record_id: str) -> StoredRecord | None:
        return self.rows.get((session_id, record_id))

    async def scope(self, session_id: str, record_id: str) -> RecordScope | None:
        r = self.rows.get((session_id, record_id))
        return None if r is None else RecordScope(r.visibility, r.run_id, r.instance_id)

    async def transfer(self, session_id: str, run_id: str, instance_id: str) -> list[str]:
        return self.transfers.get((session_id, run_id, instance_id), [])


@dataclass
class FakeThreads:
    snapshots: dict[tuple[str, str], Snapshot] = field(default_factory=dict)
    records: list[RecordView] = field(default_factory=list)  # main threads, session order

    async def snapshot(self, session_id: str, run_id: str) -> Snapshot | None:
        return self.snapshots.get((session_id, run_id))

    async def inherited(
        self, session_id: str, through: int, covered: frozenset[str] = frozenset()
    ) -> Inherited:
        # Every covered record is read here, with its content: the renderer never shows
        # it anyway (PgThreads reads only the tracked ones and counts the others).
        return Inherited([r for r in self.records if r.session_sequence <= through])

    async def inherited_tail(
        self, session_id: str, after: int, through: int, covered: frozenset[str]
    ) -> Inherited:
        return Inherited([r for r in self.records if after < r.session_sequence <= through])

    async def own(
        self, session_id: str, run_id: str, instance_id: str, after: int
    ) -> list[RecordView]:
        return [
            r
            for r in self.records
            if (r.run_id, r.instance_id) == (run_id, instance_id) and r.session_sequence > after
        ]

    async def transferred(self, session_id: str, run_id: str, instance_id: str) -> list[RecordView]:
        return []


@dataclass
class FakeCompactionReads:
    counters: Counters = field(default_factory=Counters)
    summary_ref: SummaryRef | None = None
    summaries: dict[str, SummaryView] = field(default_factory=dict)
    active_job_id: str | None = None
    # What the processor decides about each observation, in order (None: undecided yet).
    outcomes: list[JobStatus | None] = field(default_factory=list)
    # Applied once the first decided outcome is read: the state a finished job leaves.
    after_job: tuple[Counters, SummaryRef | None] | None = None
    idle: int | None = None  # ms since the session's last model call

    async def state(
        self,
        session_id: str,
        run_id: str,
        through: int,
        child_instance_id: str | None = None,
        row: object = None,
    ) -> ViewState:
        return ViewState(
            session_id,
            run_id,
            child_instance_id or "main",
            through,
            self.counters,
            self.summary_ref,
            self.active_job_id,
            "0:0",
        )

    async def summary(self, summary_id: str) -> SummaryView | None:
        return self.summaries.get(summary_id)

    async def observation_outcome(self, session_id: str, event_key: str) -> JobStatus | None:
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None and self.after_job is not None:
            self.counters, self.summary_ref = self.after_job
        return outcome

    async def idle_ms(self, session_id: str) -> int | None:
        return self.idle


@dataclass
class FakeWaiter:
    waited: list[dict[int, int]] = field(default_factory=list)

    async def wait(self, offsets: dict[int, int], timeout: float) -> None:
        self.waited.append(dict(offsets))

    async def changed(self, timeout: float) -> None:
        return None


@dataclass
class FakeKeys:
    rows: dict[str, StoredKey] = field(default_factory=dict)

    def issue(self, space_id: str, kind: KeyKind, actor_id: str | None = None) -> str:
        fresh = new_key()
        cred = Credential(fresh.key_id, space_id, kind, actor_id)
        self.rows[fresh.key_id] = StoredKey(cred, fresh.digest)
        return fresh.key

    async def find(self, key_id: str) -> StoredKey | None:
        return self.rows.get(key_id)


PROFILE = {
    "name": "m",
    "counting": "estimate",
    "context_capacity": 4000,
    "output_reserve": 500,
    "safety_margin": 100,
}


@dataclass
class PrepareWorld:
    """The real use cases over fakes (wired by ``bootstrap.build_service``)."""

    releases: FakeReleases = field(default_factory=FakeReleases)
    sessions: FakeSessions = field(default_factory=FakeSessions)
    model_calls: FakeModelCalls = field(default_factory=FakeModelCalls)
    blobs: FakeBlobs = field(default_factory=FakeBlobs)
    records: FakeRecords = field(default_factory=FakeRecords)
    compaction: FakeCompactionReads = field(default_factory=FakeCompactionReads)
    threads: FakeThreads = field(default_factory=FakeThreads)
    keys: FakeKeys = field(default_factory=FakeKeys)
    publisher: FakePublisher = field(default_factory=FakePublisher)
    notes: FakePublisher | None = None  # the observability notes' own (None: ``publisher``)
    waiter: FakeWaiter = field(default_factory=FakeWaiter)
    prepared: FakePreparedContexts = field(default_factory=FakePreparedContexts)
    calibrations: FakeCalibrations = field(default_factory=FakeCalibrations)
    hooks: HookRegistry = field(default_factory=HookRegistry)
    known_hooks: tuple[str, ...] = ()  # hook ids of compaction hooks this deployment loads
    clock: list[float] = field(default_factory=lambda: [0.0])  # the calibration cache's
    options: Options = field(default_factory=lambda: Options(compaction_wait_s=5.0))
    _svc: PrepareService | None = None
    _seq: int = 0

    @property
    def svc(self) -> PrepareService:
        if self._svc is None:
            adapters = Adapters(
                self.releases,
                self.sessions,
                self.model_calls,
                self.blobs,
                self.records,
                self.compaction,
                self.threads,
                self.keys.find,
                self.publisher,
                self.waiter,
                self.prepared,
                self.calibrations,
                notes=self.notes,
            )
            self.model_calls.calibrations = self.calibrations
            counter = CachedCounter(ByteEstimateCounter())
            self._svc = build_service(
                adapters, self.options, counter, self.hooks, self.known_hooks, self.now
            )
        return self._svc

    def now(self) -> float:
        return self.clock[0]

    def instance(self) -> PrepareWorld:
        """A second Prepare instance over the same stores (issue 13): its own process
        memory (caches), the same PostgreSQL and Kafka."""
        return replace(self, _svc=None)

    def run(self, sid: str, run_id: str, through: int = 0, status: str = "active") -> None:
        """A run as the processor leaves it once it accepted the start."""
        main = f"{run_id}.main"
        self.sessions.runs[(sid, run_id)] = RunState(run_id, main, status)
        snap = Snapshot(1, sid, run_id, main, through, "pol_x", status)
        self.threads.snapshots[(sid, run_id)] = self.sessions.snapshots[(sid, run_id)] = snap

    def say(self, sid: str, run_id: str, kind: str, text: str, **payload: Any) -> RecordView:
        """A committed record of the run's main thread."""
        self._seq += 1
        authority = {"user_input": "user", "assistant_message": "model"}.get(kind, "tool")
        rec = RecordView(
            f"rec-{self._seq}",
            self._seq,
            run_id,
            f"{run_id}.main",
            kind,
            authority,
            text,
            dict(payload),
            len(text.encode()),
            -1,
            hashlib.sha256(text.encode()).hexdigest(),
        )
        self.threads.records.append(rec)
        return rec
