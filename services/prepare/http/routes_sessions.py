"""Routes of releases (R1.4, R17), sessions, runs and event outcomes (R1)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from domain.auth import Action, Principal, authorize_release, session_owner
from schemas.answers.sessions import (
    EventOutcome,
    Release,
    ReleasePublished,
    RunLifecycle,
    RunStarted,
    Session,
)
from services.prepare.bodies import FinishIn, ReleaseIn, RunIn, RunLifecycleIn, SessionIn
from services.prepare.fields import AppendOffset, AppendPartition, PathId, PathKey
from services.prepare.http.errors import CONFLICT
from services.prepare.service import PrepareService


def release_routes(app: FastAPI, svc: PrepareService, auth: Any) -> None:
    """Publish a release and read it back."""

    @app.post("/v1/releases", status_code=201, responses=CONFLICT)
    async def register_release(body: ReleaseIn, who: Principal = auth) -> ReleasePublished:
        """Publish a release in the key's space (host keys only); ids are global."""
        authorize_release(who, body.release_id or "", None, Action.RELEASE_PUBLISH).enforce()
        return await svc.releases.register(body, who.space_id)

    @app.get("/v1/releases/{release_id}")
    async def get_release(release_id: PathId, who: Principal = auth) -> Release:
        return await svc.access.authorized_release(release_id, who)


def session_routes(app: FastAPI, svc: PrepareService, auth: Any) -> None:
    """Open and read sessions; start, resume and finish runs; event outcomes."""

    @app.post("/v1/sessions", status_code=201, responses=CONFLICT)
    async def open_session(body: SessionIn, who: Principal = auth) -> Session:
        """Open a session in the key's space for its owner: a user key's own actor, or any
        actor of the space for a host key."""
        owner = session_owner(who, body.space_id, body.actor_id)
        if not isinstance(owner, str):
            owner.enforce()  # a refusal: raises
            raise AssertionError("session_owner refused without a reason")
        return await svc.runs.open_session(body, who.space_id, owner)

    @app.get("/v1/sessions/{session_id}")
    async def get_session(session_id: PathId, who: Principal = auth) -> Session:
        sid = (await svc.access.authorize(session_id, who, Action.SESSION_READ)).session_id
        return await svc.runs.session(sid)

    @app.post("/v1/sessions/{session_id}/runs", status_code=201, responses=CONFLICT)
    async def start_run(session_id: PathId, body: RunIn, who: Principal = auth) -> RunStarted:
        sid = (await svc.access.authorize(session_id, who, Action.SESSION_WRITE)).session_id
        return await svc.runs.start_run(sid, body)

    @app.post("/v1/sessions/{session_id}/runs/{run_id}/resume", responses=CONFLICT)
    async def resume_run(
        session_id: PathId, run_id: PathId, body: RunLifecycleIn, who: Principal = auth
    ) -> RunLifecycle:
        """R1.2: continue an earlier run (same run_id, thread and snapshot) once the
        processor accepted it; 409 ``run_active`` while another run is active (R1.3)."""
        sid = (await svc.access.authorize(session_id, who, Action.SESSION_WRITE)).session_id
        return await svc.runs.resume_run(sid, run_id, body)

    @app.post("/v1/sessions/{session_id}/runs/{run_id}/finish", responses=CONFLICT)
    async def finish_run(
        session_id: PathId, run_id: PathId, body: FinishIn, who: Principal = auth
    ) -> RunLifecycle:
        """Finish (or cancel) the run once the processor accepted it; 409
        ``run_not_active`` when it already ended otherwise. Appends to an ended run are
        dead-lettered (``run_not_active``) until it is resumed."""
        sid = (await svc.access.authorize(session_id, who, Action.SESSION_WRITE)).session_id
        return await svc.runs.finish_run(sid, run_id, body)

    # Only the fields the outcome has: a committed event carries no refusal, a refused one
    # no record.
    @app.get("/v1/sessions/{session_id}/events/{event_key}", response_model_exclude_unset=True)
    async def event_outcome(
        session_id: PathId,
        event_key: PathKey,
        partition: AppendPartition = None,
        offset: AppendOffset = None,
        who: Principal = auth,
    ) -> EventOutcome:
        """What the processor decided for the event: committed, or refused with its code
        (``rejected`` / ``dead_letter``). With the ``partition`` and ``offset`` the append
        was written at, an event the processor passed without applying or attributing
        to this session is ``dead_letter`` ``not_applied`` instead of ``unknown``."""
        sid = (await svc.access.authorize(session_id, who, Action.SESSION_READ)).session_id
        at = None if partition is None or offset is None else (partition, offset)
        return await svc.runs.outcome(sid, event_key, at)
