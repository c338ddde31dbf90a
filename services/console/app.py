"""The console's FastAPI app: sign-in, the pages' routers, analytics, static files, and
the two answers every page may give instead of itself (sign in, refused)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

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
from services.console.prepare_client import PrepareClient
from services.console.settings import ConsoleSettings
from storage.pool import create_pool


def create_app(settings: ConsoleSettings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await create_pool(settings.pg_dsn, 1, 4)
        prepare = PrepareClient(settings.prepare_url)
        app.state.console = Console(pool, prepare, settings.secure_cookie)
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

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, _: SignInRequired) -> Response:
        return RedirectResponse(f"/login?next={request.url.path}", status_code=303)

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
