"""Routes of read-back, grants and the content store (R3.3, R3.4, R10.3, R13.2)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request

from domain.auth import Action, Principal
from schemas.answers.content import Blob, Grant, GrantRevoked, RecordPage
from services.prepare.bodies import GrantIn
from services.prepare.fields import Limit, Offset, PathId, QueryId
from services.prepare.service import PrepareService


def content_routes(app: FastAPI, svc: PrepareService, auth: Any) -> None:
    """Paged read-back of records, grants, blobs."""

    @app.get("/v1/sessions/{session_id}/records/{record_id}")
    async def read_record(
        session_id: PathId,
        record_id: PathId,
        offset: Offset = 0,
        limit: Limit = 65536,
        run_id: QueryId = None,
        instance_id: QueryId = None,
        who: Principal = auth,
    ) -> RecordPage:
        """Read a source record back by id, paged. With ``run_id`` + ``instance_id`` the
        read is made on behalf of that thread and scope-checked (a child thread reads
        only its own records and its transfer: ``not_granted`` otherwise)."""
        sid = (await svc.access.authorize(session_id, who, Action.SESSION_READ)).session_id
        return await svc.readback.read_record(sid, record_id, offset, limit, run_id, instance_id)

    @app.post("/v1/sessions/{session_id}/grants", status_code=201)
    async def grant(session_id: PathId, body: GrantIn, who: Principal = auth) -> Grant:
        """Let ``actor_id`` read the session (R3.3): only its owner, or the host key acting
        as itself or for the owner; ``granted_by`` is derived from the key."""
        return await svc.readback.grant(session_id, who, body.actor_id)

    @app.delete("/v1/sessions/{session_id}/grants/{actor_id}")
    async def revoke_grant(
        session_id: PathId, actor_id: PathId, who: Principal = auth
    ) -> GrantRevoked:
        """Take ``actor_id``'s grant back: who may grant may revoke (the owner,
        or the host key acting as itself or for the owner); others are refused as for a
        grant (403; 404 from another space). Idempotent (``revoked``: there was one).
        Every Prepare instance refuses the actor's reads within 10 s (its key cache's
        TTL), the answering one at once."""
        return await svc.readback.revoke(session_id, who, actor_id)

    @app.put("/v1/blobs")
    async def put_blob(request: Request, who: Principal = auth) -> Blob:
        """Content store (R3.4): any key; content-addressed in the key's space, readable
        only through the records of that space that reference it."""
        media = request.headers.get("content-type", "text/plain")
        return await svc.content.put(who.space_id, await request.body(), media)
