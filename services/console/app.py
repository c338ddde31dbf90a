"""The console's FastAPI app: sign-in, the pages' routers, analytics, static files, the
two answers every page may give instead of itself (sign in, refused), and the guards
around every answer: security headers, the Origin check, Prepare's body limit
and error shape."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from services.console import account_routes, inspector_routes, settings_routes
from services.console.context import (
    HERE,
    Console,
    Refused,
    SignInRequired,
    page,
)
from services.console.guards import OriginCheck, SecurityHeaders
from services.console.prepare_client import PrepareClient
from services.console.session_store import SessionStore
from services.console.settings import ConsoleSettings
from services.prepare.http.errors import install_error_handlers
from services.prepare.http.middleware import BodyLimit, ErrorShield
from storage.pool import create_pool


def create_app(settings: ConsoleSettings) -> FastAPI:
    secret = (
        settings.secret.get_secret_value().encode()
        if settings.secret is not None
        else secrets.token_bytes(32)
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await create_pool(settings.pg_dsn, 1, 4)
        prepare = PrepareClient(settings.prepare_url)
        store = SessionStore(pool, settings.session_idle_s, settings.session_max_s)
        app.state.console = Console(pool, prepare, store, secret, settings.secure_cookie)
        try:
            yield
        finally:
            await prepare.close()
            await pool.close()

    app = FastAPI(title="AgentLoom Context — console", lifespan=lifespan, docs_url=None)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.include_router(settings_routes.router)
    app.include_router(inspector_routes.router)
    app.include_router(account_routes.router)
    # Prepare's answers to what no route takes: 404/405/413/415/422 and our 500, one
    # JSON shape with a machine-readable code (never a bare 500 for a malformed request).
    install_error_handlers(app)
    # Innermost first: the body limit sees Content-Length before a byte is read; the
    # Origin check refuses a foreign form post before it is parsed; the headers go on
    # every answer, the shield's 500 and the 413 included.
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes, max_blob_bytes=0)
    app.add_middleware(OriginCheck, allowed=settings.allowed_origins)
    app.add_middleware(ErrorShield)
    app.add_middleware(SecurityHeaders)

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, _: SignInRequired) -> Response:
        return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)

    @app.exception_handler(Refused)
    async def _refused(request: Request, exc: Refused) -> Response:
        return page(request, "refused.html", status=exc.status, error=exc)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/")
    async def home() -> Response:
        return RedirectResponse("/inspector", status_code=303)

    return app
