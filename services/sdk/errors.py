"""The SDK's error: every failed call to the Prepare service, with a machine-readable code."""

from __future__ import annotations

from typing import Any

from schemas.errors import ContextError


class ApiError(ContextError):
    """A call to the Prepare service that did not succeed — always with a ``code``: the
    server's (``run_active``, ``not_committed_yet``, ...) or, when no answer of our shape
    came, ``timeout`` / ``unavailable`` (no answer; ``status`` 0), ``http_<status>`` (an
    error status without our body, e.g. from a proxy) or ``bad_response`` (a success that
    is not a JSON object). ``retriable`` is the server's, or ours for those."""

    def __init__(self, status: int, body: dict[str, Any], *, retriable: bool | None = None):
        err = body.get("error")
        if not isinstance(err, dict) or not isinstance(err.get("code"), str):
            err = {"code": f"http_{status}", "message": str(body)[:500]}
        details = err.get("details")
        super().__init__(str(err.get("message") or err["code"]))
        self.details = details if isinstance(details, dict) else {}
        self.status = status
        self.code = err["code"]  # type: ignore[misc]
        if retriable is None:
            retriable = err.get("retriable") is True or status in (502, 503, 504)
        self.retriable = retriable  # type: ignore[misc]

    @classmethod
    def of(cls, status: int, code: str, message: str, retriable: bool) -> ApiError:
        return cls(status, {"error": {"code": code, "message": message}}, retriable=retriable)
