"""HTTP API of the Prepare service (OpenAPI at ``/openapi.json``, docs at ``/docs``).

Errors are ``{"error": {"code", "message", "retriable", "details"}}`` with the status
mapped from the error class; clients branch on ``code``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, ORJSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from schemas.auth import (
    Action,
    KeyKind,
    Principal,
    authorize_release,
    session_owner,
)
from schemas.errors import ContextError, InvalidRequest, NotFound, NotGranted, Unauthenticated
from schemas.settings import Settings
from services.metrics import PREPARE_SECONDS
from services.prepare.fields import Limit, Offset, PathId, PathKey, QueryId
from services.prepare.http_errors import CONFLICT, HOOKS, ApiRoute, install_error_handlers
from services.prepare.metrics_mw import RequestMetrics
from services.prepare.middleware import BodyLimit, ErrorShield
from services.prepare.requests import (
    FinishIn,
    GrantIn,
    ModelCallIn,
    ModelResultIn,
    PrepareIn,
    ReleaseIn,
    RunIn,
    RunLifecycleIn,
    SessionIn,
)
from services.prepare.service import PrepareService
from storage import analytics

ACTOR = Header(
    default=None,
    alias="X-AgentLoom-Actor",
    description="With a host API key: the actor of its space the runtime acts for (absent:"
    " the runtime itself). With a user API key: must be the key's actor if sent. Another"
    " actor than the session's owner needs a grant to read, and cannot act.",
)
BEARER = HTTPBearer(
    auto_error=False,
    description="API key of one tenant space (agentloom-keys create): Authorization: Bearer <key>",
)
# Documented on every authenticated route (R15.4).
AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "unauthenticated: no API key, or a malformed, unknown or revoked one"},
    403: {"description": "not_granted: the key's actor may not do this"},
    404: {"description": "not_found: unknown, or of another tenant space"},
}


def _utc(at: datetime | None) -> datetime | None:
    """A naive time is UTC; one PostgreSQL cannot hold is a 422, not a 500."""
    if at is None:
        return None
    try:
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    except (OverflowError, ValueError) as exc:
        raise InvalidRequest(f"time out of range: {at!r}") from exc


def create_api(svc: PrepareService, settings: Settings | None = None) -> FastAPI:
    limits = settings or Settings.model_construct()  # the defaults, not the environment
    app = FastAPI(
        title="AgentLoom Context — Prepare", version="0.1.0", default_response_class=ORJSONResponse
    )
    # 4xx never 5xx (issue 10.3): every status documented with one error shape, a JSON
    # body or 415, a size limit or 413, and a last answer that keeps the connection.
    app.router.route_class = ApiRoute
    install_error_handlers(app)
    app.add_middleware(
        BodyLimit, max_bytes=limits.max_request_bytes, max_blob_bytes=limits.max_blob_bytes
    )
    app.add_middleware(ErrorShield)
    app.add_middleware(RequestMetrics)

    async def principal(
        bearer: HTTPAuthorizationCredentials | None = Depends(BEARER),  # noqa: B008
        actor: str | None = ACTOR,
    ) -> Principal:
        """R15.4: every route but the health check authenticates; the actor comes from
        the key (a host key's header names it within the key's space)."""
        return await svc.authenticate(bearer.credentials if bearer else None, actor)

    auth = Depends(principal)

    @app.exception_handler(Unauthenticated)
    async def _unauthenticated(_: Request, exc: Unauthenticated) -> JSONResponse:
        return ORJSONResponse(
            {"error": exc.to_dict()},
            status_code=exc.http_status,
            headers={"WWW-Authenticate": "Bearer"},
        )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        """Prometheus exposition; like the health check, no key (scrapers have none)."""
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/analytics/rollups")
    async def analytics_rollups(
        window: Literal["1m", "1h"] = "1m",
        start: Annotated[
            datetime | None, Query(alias="from", description="first window start (inclusive)")
        ] = None,
        end: Annotated[
            datetime | None, Query(alias="to", description="last window start (exclusive)")
        ] = None,
        space: QueryId = None,
        agent: QueryId = None,
        purpose: QueryId = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
        who: Principal = auth,
    ) -> dict[str, Any]:
        """R18 rollups of the key's tenant space (host keys only: they span every actor),
        per tumbling window (event time) and agent / release / model / purpose: prepares,
        estimated input tokens, refusals by reason, trigger checks by decision,
        compactions by outcome and reason, tokens before/after/saved, summarizer calls,
        model calls and usage, dead letters by reason (``metric`` + ``label``);
        ``distributions``: count, sum, p50 and p95 of the ``*_hist`` rows (within 2%)."""
        if space is not None and space != who.space_id:
            raise NotFound(f"space {space} not found")
        if who.credential.kind is not KeyKind.HOST:
            raise NotGranted("analytics span every actor of a space: host keys only")
        rows = await analytics.query(
            svc.pool, window, who.space_id, _utc(start), _utc(end), agent, purpose, limit + 1
        )
        return {
            "window": window,
            "space_id": who.space_id,
            "rows": rows[:limit],
            "distributions": analytics.distributions(rows[:limit]),
            "truncated": len(rows) > limit,
        }

    @app.post("/v1/releases", status_code=201, responses=CONFLICT)
    async def register_release(body: ReleaseIn, who: Principal = auth) -> dict[str, Any]:
        """Publish a release in the key's space (host keys only); ids are global."""
        authorize_release(who, body.release_id or "", None, Action.RELEASE_PUBLISH).enforce()
        return await svc.register_release(body, who.space_id)

    @app.get("/v1/releases/{release_id}")
    async def get_release(release_id: PathId, who: Principal = auth) -> dict[str, Any]:
        return await svc.authorized_release(release_id, who)

    @app.post("/v1/sessions", status_code=201, responses=CONFLICT)
    async def open_session(body: SessionIn, who: Principal = auth) -> dict[str, Any]:
        """Open a session in the key's space for its owner: a user key's own actor, or any
        actor of the space for a host key."""
        owner = session_owner(who, body.space_id, body.actor_id)
        if not isinstance(owner, str):
            owner.enforce()  # a refusal: raises
            raise AssertionError("session_owner refused without a reason")
        return await svc.open_session(body, who.space_id, owner)

    @app.get("/v1/sessions/{session_id}")
    async def get_session(session_id: PathId, who: Principal = auth) -> dict[str, Any]:
        await svc.authorize(session_id, who, Action.SESSION_READ)
        return await svc.session(session_id)

    @app.post("/v1/sessions/{session_id}/runs", status_code=201, responses=CONFLICT)
    async def start_run(session_id: PathId, body: RunIn, who: Principal = auth) -> dict[str, Any]:
        await svc.authorize(session_id, who, Action.SESSION_WRITE)
        return await svc.start_run(session_id, body)

    @app.post("/v1/sessions/{session_id}/runs/{run_id}/resume", responses=CONFLICT)
    async def resume_run(
        session_id: PathId, run_id: PathId, body: RunLifecycleIn, who: Principal = auth
    ) -> dict[str, Any]:
        """R1.2: continue an earlier run (same run_id, thread and snapshot) once the
        processor accepted it; 409 ``run_active`` while another run is active (R1.3)."""
        await svc.authorize(session_id, who, Action.SESSION_WRITE)
        return await svc.resume_run(session_id, run_id, body)

    @app.post("/v1/sessions/{session_id}/runs/{run_id}/finish", responses=CONFLICT)
    async def finish_run(
        session_id: PathId, run_id: PathId, body: FinishIn, who: Principal = auth
    ) -> dict[str, Any]:
        """Finish (or cancel) the run once the processor accepted it; 409
        ``run_not_active`` when it already ended otherwise. Appends to an ended run are
        dead-lettered (``run_not_active``) until it is resumed."""
        await svc.authorize(session_id, who, Action.SESSION_WRITE)
        return await svc.finish_run(session_id, run_id, body)

    @app.post(
        "/v1/sessions/{session_id}/runs/{run_id}/prepare",
        response_class=ORJSONResponse,
        responses={
            200: {
                "description": "PreparedContext: messages, tools, budget report, "
                "dependency versions, block → source map (record_ids)"
            },
            **HOOKS,
        },
    )
    async def prepare(
        session_id: PathId, run_id: PathId, body: PrepareIn, who: Principal = auth
    ) -> ORJSONResponse:
        # Returned as a ready response: FastAPI's generic pydantic serialization of a
        # 10k-message dict cost ~3x the assembly itself.
        await svc.authorize(session_id, who, Action.SESSION_WRITE)
        started, outcome = time.perf_counter(), "error"
        try:
            out = await svc.prepare(session_id, run_id, body)
            outcome = "ok"
        except ContextError as exc:
            outcome = exc.code
            raise
        finally:
            elapsed = time.perf_counter() - started
            PREPARE_SECONDS.labels(body.purpose, outcome).observe(elapsed)
        return ORJSONResponse(out)

    @app.post(
        "/v1/sessions/{session_id}/runs/{run_id}/model-calls", status_code=201, responses=HOOKS
    )
    async def model_call(
        session_id: PathId, run_id: PathId, body: ModelCallIn, who: Principal = auth
    ) -> ORJSONResponse:
        """The gateway's final check (R9.8, R10.5, R14): ``model.chat.before`` hooks, the
        protected block manifest, the same budget. 201 with the provider-ready
        ``request`` to send; 409 ``context_reprepare_required`` (once); 422
        ``context_budget_exceeded`` or ``protected_block_violation`` — nothing is sent."""
        await svc.authorize(session_id, who, Action.SESSION_WRITE)
        out = await svc.model_call(session_id, run_id, body)
        return ORJSONResponse(out, status_code=201)

    @app.post("/v1/sessions/{session_id}/model-calls/{call_id}/result", responses=HOOKS)
    async def model_result(
        session_id: PathId, call_id: PathId, body: ModelResultIn, who: Principal = auth
    ) -> dict[str, Any]:
        """The response and the provider's usage (R15.1): ``model.chat.after`` hooks run,
        usage calibrates later estimates and the drift is returned (R6.4)."""
        await svc.authorize(session_id, who, Action.SESSION_WRITE)
        return await svc.model_result(session_id, call_id, body)

    @app.get("/v1/sessions/{session_id}/records/{record_id}")
    async def read_record(
        session_id: PathId,
        record_id: PathId,
        offset: Offset = 0,
        limit: Limit = 65536,
        run_id: QueryId = None,
        instance_id: QueryId = None,
        who: Principal = auth,
    ) -> dict[str, Any]:
        """Read a source record back by id, paged. With ``run_id`` + ``instance_id`` the
        read is made on behalf of that thread and scope-checked (a child thread reads
        only its own records and its transfer: ``not_granted`` otherwise)."""
        await svc.authorize(session_id, who, Action.SESSION_READ)
        return await svc.read_record(session_id, record_id, offset, limit, run_id, instance_id)

    @app.post("/v1/sessions/{session_id}/grants", status_code=201)
    async def grant(session_id: PathId, body: GrantIn, who: Principal = auth) -> dict[str, Any]:
        """Let ``actor_id`` read the session (R3.3): only its owner, or the host key acting
        as itself or for the owner; ``granted_by`` is derived from the key."""
        return await svc.grant(session_id, who, body.actor_id)

    @app.put("/v1/blobs")
    async def put_blob(request: Request, who: Principal = auth) -> dict[str, Any]:
        """Content store (R3.4): any key; content-addressed, readable only through the
        records that reference it."""
        media = request.headers.get("content-type", "text/plain")
        return await svc.put_blob(await request.body(), media)

    @app.get("/v1/sessions/{session_id}/events/{event_key}")
    async def event_outcome(
        session_id: PathId, event_key: PathKey, who: Principal = auth
    ) -> dict[str, Any]:
        await svc.authorize(session_id, who, Action.SESSION_READ)
        return await svc.outcome(session_id, event_key)

    # Every route that authenticates documents the answers it may give for that reason.
    for route in app.routes:
        if isinstance(route, APIRoute) and principal in (
            d.call for d in route.dependant.dependencies
        ):
            route.responses = AUTH_RESPONSES | dict(route.responses)
    return app
