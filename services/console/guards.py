"""ASGI guards around every console answer: security headers, and the Origin check on
every unsafe method (the CSRF token, which needs the parsed form, is ``csrf.py``'s).

Plain ASGI, like Prepare's ``BodyLimit``: the headers go on every answer — a 413, a 500,
a static file — and a foreign Origin is refused before a byte of the body is read.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas.errors import ContextError
from services.prepare.http.middleware import send_error

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# The pages use only their own script and stylesheet (no inline script, style or
# handler attribute) and post only to themselves; no page may be framed.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)


class ForeignOrigin(ContextError):
    code = "origin_refused"
    http_status = 403


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                have = {name.lower() for name, _ in message.get("headers", ())}
                extra = [(k, v) for k, v in HEADERS if k not in have]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def own_origin(scope: Scope) -> str:
    host = Headers(scope=scope).get("host") or ""
    return f"{scope.get('scheme', 'http')}://{host}".lower()


def refusal(scope: Scope, allowed: tuple[str, ...]) -> ForeignOrigin | None:
    """Why an unsafe request may not be served (None: it may). A browser names the page
    a request comes from in Origin (else Referer); another origin — another port or
    subdomain of the same site included — is refused. A request naming neither is no
    browser's form post (it carries no cookie of the user's by itself); the CSRF token
    still applies to it."""
    if scope["method"] in SAFE_METHODS:
        return None
    headers = Headers(scope=scope)
    named = headers.get("origin")
    if named is None and (referer := headers.get("referer")) is not None:
        named = _origin_of(referer) or "null"
    if named is None:
        return None
    ok = {o.lower().rstrip("/") for o in allowed} or {own_origin(scope)}
    if named.lower().rstrip("/") in ok:
        return None
    return ForeignOrigin(
        "a state-changing request from another origin is refused",
        origin=named[:200],
    )


class OriginCheck:
    def __init__(self, app: ASGIApp, allowed: tuple[str, ...]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (err := refusal(scope, self.allowed)) is not None:
            await send_error(send, err)
            return
        await self.app(scope, receive, send)
