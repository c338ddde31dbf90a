"""Sign-in and sign-out (a server-side session; the browser holds only its opaque id)
and the analytics page."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response

from domain.auth import KeyKind
from services.console import sealing
from services.console.context import (
    PRE_SESSION,
    SESSION,
    Console,
    SignInRequired,
    Viewer,
    authenticate,
    console_of,
    page,
    viewer,
)
from services.console.csrf import CsrfRefused, checked_viewer
from services.console.fields import RESPONSES
from services.console.prepare_client import PrepareError
from services.prepare.http.errors import ApiRoute

router = APIRouter(route_class=ApiRoute, responses=RESPONSES)
NEXT = "/inspector"


def _cookie(out: Response, c: Console, name: str, value: str, max_age: float) -> None:
    # Never readable by scripts, never sent along from another site.
    out.set_cookie(
        c.cookie(name),
        value,
        max_age=int(max_age),
        path="/",
        httponly=True,
        samesite="strict",
        secure=c.secure_cookie,
    )


@router.get("/login")
async def login_page(request: Request, next: str = NEXT) -> Response:
    c = console_of(request)
    # Kept if there is one: a second tab's sign-in page leaves the first one's good.
    pre_id = request.cookies.get(c.cookie(PRE_SESSION)) or ""
    if not sealing.is_id(pre_id):
        pre_id = sealing.new_id()
    out = page(
        request,
        "login.html",
        next=_local(next),
        error="",
        csrf=sealing.login_token(c.secret, pre_id),
    )
    _cookie(out, c, PRE_SESSION, pre_id, c.sessions.idle_s)
    return out


@router.post("/login", responses={401: {"description": "an unknown or revoked API key"}})
async def login(
    request: Request,
    api_key: str = Form(..., max_length=512),
    next: str = Form(NEXT, max_length=2048),
    csrf_token: str = Form("", max_length=256),
) -> Response:
    c = console_of(request)
    pre_id = request.cookies.get(c.cookie(PRE_SESSION)) or ""
    if not pre_id or not sealing.same(csrf_token, sealing.login_token(c.secret, pre_id)):
        raise CsrfRefused("sign in from the console's own sign-in page (reload it)")
    try:
        await authenticate(c, api_key.strip())
    except SignInRequired:
        return page(
            request, "login.html", 401, next=_local(next), error="Unknown API key.", csrf=csrf_token
        )
    if old := request.cookies.get(c.cookie(SESSION)):
        await c.sessions.close(old)  # a new session id at every sign-in (no fixation)
    out = RedirectResponse(_local(next), status_code=303)
    session_id = await c.sessions.open(api_key.strip())
    _cookie(out, c, SESSION, session_id, c.sessions.max_s)
    out.delete_cookie(c.cookie(PRE_SESSION), path="/", secure=c.secure_cookie)
    return out


@router.post("/logout")
async def logout(request: Request, v: Viewer = Depends(checked_viewer)) -> Response:  # noqa: B008
    """Ends the session on the server: its id is refused from now on, by every instance."""
    c = console_of(request)
    await c.sessions.close(v.session_id)
    out = RedirectResponse("/login", status_code=303)
    out.delete_cookie(c.cookie(SESSION), path="/", secure=c.secure_cookie, httponly=True)
    return out


@router.get("/analytics")
async def analytics(request: Request, v: Viewer = Depends(viewer)) -> Response:  # noqa: B008
    """R18: a table of Prepare's rollups for host keys; charts come with the
    analytics issue."""
    rows: list[dict[str, object]] = []
    note = ""
    if v.who.credential.kind is KeyKind.HOST:
        try:
            rows = (await console_of(request).prepare.rollups(v.key)).get("rows") or []
        except PrepareError as exc:
            note = f"{exc.code}: {exc.message}"
    else:
        note = "Analytics span every actor of a space: sign in with a host key."
    return page(request, "analytics.html", viewer=v, rows=rows, note=note)


def _local(path: str) -> str:
    """Only a path on this site is a target after sign-in (no open redirect)."""
    ok = path.startswith("/") and not path.startswith(("//", "/\\"))
    ok = ok and path.isascii() and path.isprintable()
    return path if ok else NEXT
