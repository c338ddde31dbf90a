"""Sign-in and sign-out (the API key kept in an HttpOnly cookie) and the analytics
page."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response

from schemas.auth import KeyKind
from services.console.context import (
    COOKIE,
    SignInRequired,
    Viewer,
    authenticate,
    console_of,
    page,
    viewer,
)
from services.console.prepare_client import PrepareError

router = APIRouter()


@router.get("/login")
async def login_page(request: Request, next: str = "/inspector") -> Response:
    return page(request, "login.html", next=_local(next), error="")


@router.post("/login")
async def login(
    request: Request, api_key: str = Form(...), next: str = Form("/inspector")
) -> Response:
    try:
        await authenticate(console_of(request), api_key.strip())
    except SignInRequired:
        return page(request, "login.html", status=401, next=_local(next), error="Unknown API key.")
    out = RedirectResponse(_local(next), status_code=303)
    # The key is the credential for every call the console makes for this user:
    # never readable by scripts, never sent to another site.
    out.set_cookie(
        COOKIE,
        api_key.strip(),
        httponly=True,
        samesite="strict",
        secure=console_of(request).secure_cookie,
    )
    return out


@router.post("/logout")
async def logout() -> Response:
    out = RedirectResponse("/login", status_code=303)
    out.delete_cookie(COOKIE)
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
    return path if path.startswith("/") and not path.startswith("//") else "/inspector"
