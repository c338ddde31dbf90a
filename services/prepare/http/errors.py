"""One error shape for every answer of the Prepare API, and every status documented.

Whatever refuses a request — our services (``ContextError``), FastAPI's validation, the
router (404 unknown route, 405), the size guard (413), the media-type check (415), a lost
database or broker (503) or an unexpected exception (500, ``middleware.ErrorShield``) —
the body is ``{"error": {"code", "message", "retriable", "details"}}``: clients branch on
``code``, never on text.
"""

from __future__ import annotations

import email.message
from collections.abc import Callable, Coroutine
from typing import Any, TypedDict

import orjson
from fastapi import FastAPI, Request, params
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.utils import create_model_field
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from schemas.errors import ContextError, InvalidRequest
from schemas.limits import UNSTORABLE
from services.prepare.fields import json_path
from streams.faults import DRIVER_ERRORS, http_answer


class PayloadTooLarge(ContextError):
    code = "payload_too_large"
    http_status = 413


class UnsupportedMediaType(ContextError):
    code = "unsupported_media_type"
    http_status = 415


class InternalError(ContextError):
    """Nothing a caller did: logged with ``details.error_id`` to find it."""

    code = "internal_error"
    http_status = 500


class HttpError(ContextError):
    """What the router or the HTTP layer refused (unknown route, wrong method, ...)."""

    def __init__(self, status: int, message: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.http_status = status  # type: ignore[misc]
        self.code = _HTTP_CODES.get(status, f"http_{status}")  # type: ignore[misc]


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def error_response(err: ContextError, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps({"error": err.to_dict()}),
        status_code=err.http_status,
        headers=headers,
        media_type="application/json",
    )


# --- documentation ---------------------------------------------------------------------


class ErrorInfo(BaseModel):
    code: str
    message: str
    retriable: bool
    details: dict[str, Any]


class ErrorBody(BaseModel):
    """Every error answer of this API."""

    error: ErrorInfo


COMMON_RESPONSES: dict[int | str, dict[str, Any]] = {
    413: {"description": "payload_too_large: the body is over the configured limit"},
    500: {"description": "internal_error: a bug of ours, logged with details.error_id"},
}
SERVICE_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: {"description": "storage_unavailable, bus_unavailable, not_committed_yet (retriable)"},
}
PARAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"description": "not_found"},
    422: {"description": "invalid_request: the request does not match this document"},
}
JSON_BODY_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"description": "bad_request: the body could not be parsed"},
    415: {"description": "unsupported_media_type: send Content-Type: application/json"},
}
# Named by the routes that can answer them.
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"description": "conflict (release_conflict, run_active, run_not_active, ...)"},
}
HOOKS: dict[int | str, dict[str, Any]] = {
    409: {"description": "conflict, context_reprepare_required (once, retriable)"},
    502: {"description": "hook_failed: a hook raised or timed out; nothing was sent"},
}
# Whoever documents one of these on a route (this module, the route itself, the auth
# wiring), its body is documented as ErrorBody.
ERROR_STATUSES = (400, 401, 403, 404, 405, 409, 413, 415, 422, 500, 502, 503)


def _is_json(content_type: str | None) -> bool:
    if not content_type:
        return False
    msg = email.message.Message()
    msg["content-type"] = content_type
    sub = msg.get_content_subtype()
    return msg.get_content_maintype() == "application" and (sub == "json" or sub.endswith("+json"))


class ApiRoute(APIRoute):
    """Documents the statuses every route can answer, with our error body, and refuses
    a body that is not JSON on a route taking a JSON body (415, before reading it)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kw: Any) -> None:
        super().__init__(path, endpoint, **kw)
        common = dict(COMMON_RESPONSES)
        if path.startswith("/v1/"):
            common |= SERVICE_RESPONSES
        if self.dependant.path_params or self.dependant.query_params or self.body_field:
            common |= PARAM_RESPONSES
        if self._takes_json():
            common |= JSON_BODY_RESPONSES
        self.responses = common | dict(self.responses)  # a route's own entries win
        for status in ERROR_STATUSES:
            if status not in self.response_fields:
                self.response_fields[status] = create_model_field(
                    name=f"Response_{status}_{self.unique_id}",
                    type_=ErrorBody,
                    mode="serialization",
                )

    def _takes_json(self) -> bool:
        return self.body_field is not None and not isinstance(
            self.body_field.field_info, params.Form
        )

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if not self._takes_json():
            return handler

        async def json_only(request: Request) -> Response:
            if not _is_json(request.headers.get("content-type")):
                raise UnsupportedMediaType(
                    "this route takes a JSON body: send Content-Type: application/json",
                    content_type=_printable(request.headers.get("content-type") or ""),
                )
            return await handler(request)

        return json_only


# --- handlers --------------------------------------------------------------------------


def _printable(value: object, limit: int = 120) -> str | int:
    """A loc element or header safe to echo: bounded, no unstorable characters."""
    if isinstance(value, int):
        return value
    text = str(value)
    text = UNSTORABLE.sub("\ufffd", text)
    return text if len(text) <= limit else text[:limit] + "…"


class FieldProblem(TypedDict):
    """One reason a request does not match the API: where (``loc``; ``json_path`` as the
    policy's refusals name it), the validator's message and its error type."""

    loc: list[str | int]
    msg: str | int
    type: str
    json_path: str | int


def _validation_errors(exc: RequestValidationError) -> list[FieldProblem]:
    # Not exc.errors() as is: ``input`` may be the whole 8 MiB body (or bytes) and
    # ``ctx`` may hold exception objects, which no JSON encoder takes.
    return [
        FieldProblem(
            loc=[_printable(p) for p in e.get("loc", ())],
            msg=_printable(e.get("msg", ""), 500),
            type=e.get("type", ""),
            # Where in the body, as the policy's refusals name it.
            json_path=_printable(json_path(e.get("loc", ())), 500),
        )
        for e in exc.errors()[:50]
    ]


def install_error_handlers(app: FastAPI) -> None:
    async def _ours(_: Request, exc: Exception) -> Response:
        # The fault policy's answer (streams.faults.http_answer): our errors as they are,
        # a database, broker or socket error that reached a route untranslated as ours
        # (lost infrastructure: a retriable 503); a refusal of the database or the
        # broker is a bug of ours, re-raised for ErrorShield's logged 500.
        answer = http_answer(exc)
        if answer is None:
            raise exc
        return error_response(answer)

    handled: tuple[type[Exception], ...] = (ContextError, *DRIVER_ERRORS)
    for error in handled:
        app.add_exception_handler(error, _ours)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> Response:
        errors = _validation_errors(exc)
        first = errors[0]["json_path"] if errors else ""
        return error_response(
            InvalidRequest("request does not match the API", errors=errors, json_path=first)
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        message = exc.detail if isinstance(exc.detail, str) else "request refused"
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {_printable(request.url.path)}"
        return error_response(HttpError(exc.status_code, message), dict(exc.headers or {}))
