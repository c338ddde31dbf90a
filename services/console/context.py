"""What every console page needs: the signed-in principal from the session the cookie
names, the access decision for a session, and the template renderer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates

from domain.auth import Action, Principal, acting, authorize, grant_to_check, key_id_of, verify
from services.console import sealing
from services.console.prepare_client import PrepareClient, PrepareError
from services.console.session_store import SessionStore
from storage import inspection

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
SESSION = "alc_console_session"
PRE_SESSION = "alc_console_login"


class SignInRequired(Exception):
    """No session, or one that ended, or its key is unknown or revoked now: back to the
    sign-in page."""


class Refused(Exception):
    """The key may not see this: the page says so, and shows nothing of it."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Console:
    pool: asyncpg.Pool
    prepare: PrepareClient
    sessions: SessionStore
    # Signs the sign-in form's token (sealing.login_token).
    secret: bytes
    secure_cookie: bool = False

    def cookie(self, name: str) -> str:
        """``__Host-`` over HTTPS: this host only, path /, Secure — no subdomain can set
        or overwrite it (cookie tossing)."""
        return f"__Host-{name}" if self.secure_cookie else name


@dataclass(frozen=True)
class Viewer:
    """The signed-in key (never shown), who it acts as, and the session it came from."""

    key: str
    who: Principal
    session_id: str = ""

    @property
    def label(self) -> str:
        kind = self.who.credential.kind.value
        return f"{self.who.actor_id or 'runtime'} ({kind} key, {self.who.space_id})"

    @property
    def csrf(self) -> str:
        """The synchroniser token every state-changing request of this session carries."""
        return sealing.csrf_token(self.session_id)


def console_of(request: Request) -> Console:
    c: Console = request.app.state.console
    return c


async def authenticate(console: Console, key: str | None) -> Viewer:
    key_id = key_id_of(key)
    if not key or key_id is None:
        raise SignInRequired
    found = await inspection.credential(console.pool, key_id)
    if found is None or not verify(key, found[1]):
        raise SignInRequired
    return Viewer(key, acting(found[0], None))


async def viewer(request: Request) -> Viewer:
    """The dependency of every page but sign-in: the session's key, checked again (a
    revoked key ends its sessions at their next request)."""
    c = console_of(request)
    session_id = request.cookies.get(c.cookie(SESSION))
    key = await c.sessions.key_of(session_id) if session_id else None
    if key is None or not session_id:
        raise SignInRequired
    found = await authenticate(c, key)
    return Viewer(found.key, found.who, session_id)


async def require_session(console: Console, v: Viewer, session_id: str) -> dict[str, Any]:
    """R15.4/R18: a session page shows nothing unless our own decision over its scope and
    grants allows the read *and* Prepare answers the same key with the session."""
    scope = await inspection.session_scope(console.pool, session_id)
    if scope is None or scope.space_id != v.who.space_id:
        raise Refused(404, "not_found", f"session {session_id} not found")
    actor = grant_to_check(v.who, scope, Action.SESSION_READ)
    granted = actor is not None and await inspection.has_grant(console.pool, session_id, actor)
    decision = authorize(v.who, scope, Action.SESSION_READ, granted)
    if not decision.allowed:
        status = 404 if decision.code == "not_found" else 403
        raise Refused(status, decision.code, decision.message)
    try:
        return await console.prepare.session(v.key, session_id)
    except PrepareError as exc:
        raise Refused(exc.status, exc.code, exc.message) from exc


def page(request: Request, name: str, status: int = 200, **ctx: Any) -> Response:
    out: HTMLResponse = templates.TemplateResponse(request, name, ctx, status_code=status)
    return out
