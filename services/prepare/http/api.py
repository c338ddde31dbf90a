"""HTTP API of the Prepare service (OpenAPI at ``/openapi.json``, docs at ``/docs``):
the app, its middleware and authentication; the routes, per concern, in ``routes_*.py``.

Errors are ``{"error": {"code", "message", "retriable", "details"}}`` with the status
mapped from the error class; clients branch on ``code``.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.responses import JSONResponse, ORJSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from domain.auth import Principal
from schemas.errors import Unauthenticated
from schemas.settings import Settings
from services.prepare.http.errors import ApiRoute, install_error_handlers
from services.prepare.http.metrics import RequestMetrics
from services.prepare.http.middleware import BodyLimit, ErrorShield
from services.prepare.http.routes_calls import call_routes
from services.prepare.http.routes_content import content_routes
from services.prepare.http.routes_diagnostics import diagnostics_routes
from services.prepare.http.routes_ops import ops_routes
from services.prepare.http.routes_sessions import release_routes, session_routes
from services.prepare.service import PrepareService

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


def create_api(svc: PrepareService, settings: Settings | None = None) -> FastAPI:
    limits = settings or Settings.model_construct()  # the defaults, not the environment
    app = FastAPI(
        title="AgentLoom Context — Prepare", version="0.1.0", default_response_class=ORJSONResponse
    )
    # 4xx never 5xx: every status documented with one error shape, a JSON
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
        return await svc.access.authenticate(bearer.credentials if bearer else None, actor)

    auth = Depends(principal)

    @app.exception_handler(Unauthenticated)
    async def _unauthenticated(_: Request, exc: Unauthenticated) -> JSONResponse:
        return ORJSONResponse(
            {"error": exc.to_dict()},
            status_code=exc.http_status,
            headers={"WWW-Authenticate": "Bearer"},
        )

    # the routes, per concern, on the app itself (an included APIRouter's routes are not
    # in app.routes for the documentation pass below).
    for routes in (ops_routes, release_routes, session_routes, call_routes, content_routes):
        routes(app, svc, auth)
    diagnostics_routes(app, svc, auth)

    # Every route that authenticates documents the answers it may give for that reason.
    for route in app.routes:
        if isinstance(route, APIRoute) and principal in (
            d.call for d in route.dependant.dependencies
        ):
            route.responses = AUTH_RESPONSES | dict(route.responses)
    return app
