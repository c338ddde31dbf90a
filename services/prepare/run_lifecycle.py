"""Sessions and runs (R1): open a session; start, resume and finish runs.

Prepare is a reader of session state: it never writes records, runs or counters itself.
A run start is an event published to the session's partition; the session processor
(the single writer) accepts or refuses it, and Prepare reports what it decided.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from domain.planning.lifecycle import lifecycle_key
from schemas.answers.sessions import EventOutcome, RunLifecycle, RunSnapshot, RunStarted, Session
from schemas.contracts import (
    Authority,
    Content,
    ContextEvent,
    RecordKind,
    RunLifecyclePayload,
    Scope,
    Source,
)
from schemas.errors import (
    Conflict,
    InvalidRequest,
    NotCommittedYet,
    NotFound,
    RunActive,
    RunNotActive,
)
from schemas.validation import run_start_problem, validate_event
from services.bus import send_event
from services.prepare.assembly.views import ThreadViews
from services.prepare.assembly.waiter import Waiter
from services.prepare.bodies import FinishIn, RunIn, RunLifecycleIn, SessionIn, offsets_of
from services.prepare.publishing import ReleaseBook
from storage.sessions import Refusal, Sessions
from streams.kafka.publish import Publisher

# An append the processor passed without a record or a refusal of this session.
NOT_APPLIED = EventOutcome(
    outcome="dead_letter",
    code="not_applied",
    message="the processor passed this append without applying it or recording a refusal"
    " for this session: it was refused before it could be attributed to the session (no"
    " valid signature — e.g. a user key, a revoked key or another deployment's key — or"
    " the scope of another session); the dead-letter topic holds the reason",
)


@dataclass(frozen=True)
class Identity:
    """What of a session never changes."""

    space_id: str
    actor_id: str
    release_id: str


IDENTITIES_MAX = 65_536  # sessions remembered; then forgotten at once (read again)


@dataclass
class Runs:
    sessions: Sessions
    releases: ReleaseBook
    publisher: Publisher
    topic: str  # the records topic
    waiter: Waiter
    views: ThreadViews
    commit_wait_s: float
    host_id: str = "prepare"
    # A session's space, actor and release never change (opening it again with others
    # is refused, R1.4; ``Access`` keeps its scope alike): a start or a finish reads no
    # session row once its session was seen.
    _identities: dict[str, Identity] = field(default_factory=dict)

    async def open_session(self, body: SessionIn, space_id: str, actor_id: str) -> Session:
        """``space_id`` and ``actor_id`` are the caller's, checked by the API against its
        credential (``auth.session_owner``); the release must be visible in that space."""
        name = body.session_id or f"ses_{uuid.uuid4().hex[:16]}"
        rel = await self.releases.get(body.release_id)
        if rel.space_id not in (None, space_id):
            raise NotFound(f"release {body.release_id} not found")
        await self.releases.view(body.release_id)  # One a prepare can use
        s, created = await self._open(name, space_id, actor_id, body.release_id)
        if not created and (s.release_id, s.space_id, s.actor_id) != (
            body.release_id,
            space_id,
            actor_id,
        ):
            raise Conflict(f"session {name} exists with another release or scope (R1.4)")
        return s

    async def _open(
        self, name: str, space_id: str, actor_id: str, release_id: str
    ) -> tuple[Session, bool]:
        """The space's session ``name`` means (its global id, else its name) and whether
        this call created it. Ids are per space: a name is its session's
        global id unless another space has that id — whose session is never touched or
        named in the answer — then the session gets a server-assigned one."""
        for sid in (name, f"ses_{uuid.uuid4().hex[:16]}"):
            found = await self.sessions.resolve(space_id, name)
            if found is not None:
                return found, False  # opened before (or concurrently) in this space
            if await self.sessions.insert(sid, space_id, actor_id, release_id, name):
                return await self.session(sid), True
        found = await self.sessions.resolve(space_id, name)  # a concurrent open won
        if found is None:
            raise Conflict(f"session {name} could not be opened; try again")
        return found, False

    async def session(self, sid: str) -> Session:
        s = await self.sessions.get(sid)
        if s is None:
            raise NotFound(f"session {sid} not found")
        return s

    async def identity(self, sid: str) -> Identity:
        found = self._identities.get(sid)
        if found is None:
            s = await self.session(sid)
            if len(self._identities) >= IDENTITIES_MAX:
                self._identities.clear()
            found = self._identities[sid] = Identity(s.space_id, s.actor_id, s.release_id)
        return found

    async def start_run(self, sid: str, body: RunIn) -> RunStarted:
        # Refused here, before anything is published: the processor would dead-letter it.
        problem = run_start_problem(body.run_id, body.instance_id)
        if problem is not None:
            raise InvalidRequest(problem)
        s = await self.identity(sid)
        run_id = body.run_id or f"run_{uuid.uuid4().hex[:12]}"
        instance_id = body.instance_id or f"{run_id}.main"
        event_key = f"run_started:{run_id}"
        scope = Scope(s.space_id, s.actor_id, sid, run_id, instance_id)
        payload = RunLifecyclePayload(release_id=s.release_id)
        await self._publish(scope, event_key, RecordKind.RUN_STARTED, payload, checked=False)
        refusal, snap = await self.sessions.started(sid, run_id, event_key)  # one read
        _raise(sid, refusal)
        if snap is None:
            raise NotFound(f"run {run_id} of session {sid} not found")
        self.views.remember(snap)  # its prepares read it from memory
        return RunStarted(
            session_id=sid,
            run_id=run_id,
            instance_id=snap.main_instance_id,
            status=snap.run_status,
            snapshot=RunSnapshot(
                snapshot_id=snap.snapshot_id,
                through_session_sequence=snap.through_session_sequence,
                policy_revision=snap.policy_revision,
            ),
        )

    async def resume_run(self, sid: str, run_id: str, body: RunLifecycleIn) -> RunLifecycle:
        """R1.2: continue an earlier run — same run_id, thread and snapshot. The processor
        decides, as for a start: refused with ``run_active`` while another run is active."""
        return await self._lifecycle(sid, run_id, RecordKind.RUN_RESUMED, body)

    async def finish_run(self, sid: str, run_id: str, body: FinishIn) -> RunLifecycle:
        """End the run (``cancelled``: stopped by the user); refused with
        ``run_not_active`` when it already ended otherwise."""
        kind = RecordKind.RUN_CANCELLED if body.cancelled else RecordKind.RUN_FINISHED
        return await self._lifecycle(sid, run_id, kind, body)

    async def _lifecycle(
        self, sid: str, run_id: str, kind: RecordKind, body: RunLifecycleIn
    ) -> RunLifecycle:
        # the caller's earlier appends first: the key derives from the counters they leave
        # (a resume the caller appended itself, say).
        await self.waiter.wait(offsets_of(body.after), self.commit_wait_s)
        s = await self.identity(sid)
        event_key = body.event_key
        if event_key:  # the run's main instance never changes: its snapshot's, cached
            main = (await self.views.snapshot(sid, run_id)).main_instance_id
        else:
            run = await self.sessions.run(sid, run_id)
            if run is None:
                raise NotFound(f"run {run_id} of session {sid} not found")
            # Durable counters, not a client's memory: a restarted runtime's next resume
            # gets a new key, a retry of the same one the same key (a duplicate, answered
            # alike).
            event_key, main = lifecycle_key(kind, run), run.main_instance_id
        scope = Scope(s.space_id, s.actor_id, sid, run_id, main)
        payload = RunLifecyclePayload(reason=body.reason)
        part, off = await self._publish(scope, event_key, kind, payload, checked=False)
        refusal, after = await self.sessions.settled(sid, run_id, event_key)  # one read
        _raise(sid, refusal)
        return RunLifecycle(
            session_id=sid,
            run_id=run_id,
            instance_id=main,
            status=after.status if after else None,
            event_key=event_key,
            partition=part,
            offset=off,
        )

    async def _publish(
        self,
        scope: Scope,
        event_key: str,
        kind: RecordKind,
        payload: RunLifecyclePayload,
        checked: bool = True,
    ) -> tuple[int, int]:
        """Publish a lifecycle event, wait until the processor committed it, and report
        its refusal if it refused it (``checked=False``: the caller reads it)."""
        ev = ContextEvent(
            event_id=str(uuid.uuid4()),
            event_key=event_key,
            scope=scope,
            kind=kind,
            authority=Authority.HOST,
            source=Source("prepare", self.host_id, int(time.time() * 1000)),
            content=Content.text(""),
            payload=payload,
        )
        if kind is not RecordKind.RUN_STARTED:
            # A key the processor would dead-letter unseen is refused here (a start's ids
            # were checked by ``run_start_problem``).
            validate_event(ev)
        md = await send_event(self.publisher, self.topic, ev)
        await self.waiter.wait({md.partition: md.offset}, self.commit_wait_s)
        if checked:
            _raise(scope.session_id, await self.sessions.refusal(scope.session_id, event_key))
        return md.partition, md.offset

    async def outcome(
        self, sid: str, event_key: str, at: tuple[int, int] | None = None
    ) -> EventOutcome:
        """The event's record or recorded refusal; else, once the processor has passed
        ``at`` (the append's partition and offset), ``not_applied``: it was refused before
        it could be attributed to this session (no valid signature, or the scope of
        another session), so nothing was recorded here — its letter holds the reason.
        Otherwise ``unknown``: not processed yet.

        Whether the processor passed ``at`` is asked before the outcome is looked up: the
        other way round, a commit landing between the two read as ``not_applied`` an
        append that was applied (a shared runtime's client checks one agent's append
        after another agent's prepare, which did not wait for it)."""
        passed = False
        if at is not None:
            try:
                await self.waiter.wait({at[0]: at[1]}, 0.0)
                passed = True
            except NotCommittedYet:
                pass
        found = await self.sessions.outcome(sid, event_key)
        if found is not None:
            return found
        return NOT_APPLIED.model_copy() if passed else EventOutcome(outcome="unknown")


def _raise(sid: str, o: Refusal | None) -> None:
    """Report the processor's refusal of a committed lifecycle event (the outcome of its
    first delivery: a duplicate is answered like the original)."""
    if o is None:
        return
    if o.code == "run_active":
        raise RunActive(o.message, session_id=sid)
    if o.code == "run_not_active":
        raise RunNotActive(o.message, session_id=sid)
    raise Conflict(o.message, reason=o.code)
