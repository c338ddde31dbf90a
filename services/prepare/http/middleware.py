"""ASGI guards around the Prepare routes: the request size limit and the last answer.

Plain ASGI rather than ``BaseHTTPMiddleware``: the size check has to see Content-Length
before a byte of the body is read, and a chunked body is counted as it arrives.
"""

from __future__ import annotations

import logging
import uuid

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas.errors import ContextError
from services.prepare.http.errors import InternalError, PayloadTooLarge

log = logging.getLogger("prepare.http")

BLOB_PATH = "/v1/blobs"


async def send_error(send: Send, err: ContextError) -> None:
    body = orjson.dumps({"error": err.to_dict()})
    await send(
        {
            "type": "http.response.start",
            "status": err.http_status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimit:
    """413 ``payload_too_large`` for a body over the limit (blob uploads have their own).

    A declared Content-Length over the limit is answered at once, before the app runs;
    the server then discards the rest of the upload and keeps the connection. A chunked
    (or understated) body is counted as it is read: past the limit the read raises, and
    whatever the app would answer to that is replaced by the 413.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, max_blob_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_blob_bytes = max_blob_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_blob_bytes if scope["path"] == BLOB_PATH else self.max_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await send_error(send, _too_large(limit, declared))
            return
        received = 0
        refused: PayloadTooLarge | None = None
        started = answered = False

        async def counted() -> Message:
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = _too_large(limit, None)
                    raise refused
            return message

        async def guarded(message: Message) -> None:
            nonlocal started, answered
            if refused is None or started:
                started = started or message["type"] == "http.response.start"
                await send(message)
            elif not answered:  # the app's own answer to the cut read is replaced
                answered = True
                await send_error(send, refused)

        try:
            await self.app(scope, counted, guarded)
        except PayloadTooLarge:
            if started:
                raise
        if refused is not None and not (started or answered):
            await send_error(send, refused)


def _too_large(limit: int, declared: int | None) -> PayloadTooLarge:
    size = f"{declared} bytes" if declared is not None else "the body"
    return PayloadTooLarge(
        f"{size} is over the limit of {limit} bytes", limit_bytes=limit, content_length=declared
    )


class ErrorShield:
    """The last answer: an exception no handler took becomes our 500 shape, logged with
    an id the body repeats. Not re-raised: the server would drop the kept-alive
    connection for it (Starlette's ServerErrorMiddleware always re-raises)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            error_id = uuid.uuid4().hex[:12]
            log.exception("unhandled error %s on %s %s", error_id, scope["method"], scope["path"])
            if started:
                raise  # half an answer is out: only closing the connection can tell
            await send_error(
                send, InternalError("internal error; reported with its id", error_id=error_id)
            )
