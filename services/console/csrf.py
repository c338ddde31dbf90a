"""The CSRF token every state-changing request carries, beside the Origin
check of ``guards.py``: a same-site page (another port, a subdomain) gets the user's
SameSite cookie sent along, but cannot read a page of ours to learn the token.

Signed in: the session's synchroniser token (``Viewer.csrf``), in the form field
``csrf_token`` or the ``X-CSRF-Token`` header (the live validation's fetch). Signing in:
the pre-session token, ``HMAC(secret, pre-session id)`` with the id in its own cookie,
so that a forged sign-in (as the attacker, into the attacker's account) is refused too.
"""

from __future__ import annotations

from fastapi import Depends, Request

from schemas.errors import ContextError
from services.console import sealing
from services.console.context import Viewer, viewer

FIELD = "csrf_token"
HEADER = "x-csrf-token"
_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


class CsrfRefused(ContextError):
    code = "csrf_refused"
    http_status = 403


async def sent_token(request: Request) -> str | None:
    """The token the request carries: the header, else the form field."""
    if (header := request.headers.get(HEADER)) is not None:
        return header
    if request.headers.get("content-type", "").lower().startswith(_FORMS):
        value = (await request.form()).get(FIELD)  # parsed once: the route reads it again
        return value if isinstance(value, str) else None
    return None


async def checked_viewer(request: Request, v: Viewer = Depends(viewer)) -> Viewer:  # noqa: B008
    """The dependency of every state-changing route of a session."""
    if not sealing.same(await sent_token(request), v.csrf):
        raise CsrfRefused("missing or wrong CSRF token: reload the page and try again")
    return v
