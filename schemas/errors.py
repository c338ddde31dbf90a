"""The error hierarchy shared by every process, with stable machine-readable codes.

HTTP maps ``code`` to a status, the dead-letter topic carries it as ``reason_code``,
and callers decide on retries from ``retriable`` — never from message text.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ContextError(Exception):
    """Root of our errors. ``code`` is stable API; ``message`` is for humans."""

    code: ClassVar[str] = "context_error"
    retriable: ClassVar[bool] = False
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "retriable": self.retriable,
            "details": self.details,
        }


class InvalidEvent(ContextError):
    """An event that cannot be decoded or violates the contract; goes to dead letter."""

    code = "invalid_event"
    http_status = 400

    def __init__(self, message: str, *, reason_code: str = "invalid_event", **details: Any):
        super().__init__(message, **details)
        self.reason_code = reason_code


class UnknownSchema(InvalidEvent):
    code = "unknown_schema"


class NotFound(ContextError):
    code = "not_found"
    http_status = 404


class Unauthenticated(ContextError):
    """R15.4: no API key, or one that is malformed, unknown or revoked."""

    code = "unauthenticated"
    http_status = 401


class NotGranted(ContextError):
    """R13/R15.4: the caller's scope holds no grant for what it asked to read."""

    code = "not_granted"
    http_status = 403


class Conflict(ContextError):
    code = "conflict"
    http_status = 409


class ReleaseConflict(Conflict):
    """R1.4: a release id names one content forever; republishing it with any other
    content (policy, instructions, tools, skills, hooks, model profile) is refused."""

    code = "release_conflict"


class RunActive(Conflict):
    """R1.3: the session already has an active run; wait for it or stop it."""

    code = "run_active"


class RunNotActive(Conflict):
    """R1.3: the run is finished or cancelled; resume it first (R1.2)."""

    code = "run_not_active"


class InvalidPolicy(ContextError):
    code = "invalid_policy"
    http_status = 422


class InvalidRequest(ContextError):
    code = "invalid_request"
    http_status = 422


class ContextBudgetExceeded(ContextError):
    """R6.3/R10.4: required content alone does not fit; details itemize the sizes."""

    code = "context_budget_exceeded"
    http_status = 422


class CompactionInFlight(ContextBudgetExceeded):
    """R9.7: over the hard budget, and the job that makes room did not commit within the
    prepare's bounded wait (reason ``compaction_timeout``): nothing is sent, and the same
    prepare may succeed once the job commits, so it is worth retrying (a job whose request
    was lost is published again, or expires, as later checks see it: R15.3)."""

    retriable = True


class ContextReprepareRequired(ContextError):
    """R9.8/R14: a model before-hook pushed the call past the soft threshold; prepare again
    (once) with the hook's size reserved, so compaction can make room first."""

    code = "context_reprepare_required"
    retriable = True
    http_status = 409


class ProtectedBlockViolation(ContextError):
    """R10.5: a hook removed, altered or downgraded a required block; nothing is sent."""

    code = "protected_block_violation"
    http_status = 422


class HookFailed(ContextError):
    """A hook raised or ran past its timeout; the call is not sent (R14)."""

    code = "hook_failed"
    retriable = True
    http_status = 502


class NotCommittedYet(ContextError):
    """Read-your-writes wait ran out: the runtime's last append is not committed yet."""

    code = "not_committed_yet"
    retriable = True
    http_status = 503


class TransientError(ContextError):
    """Infrastructure that comes back (a lost connection, a database shutting down, a
    deadlock a second attempt resolves): retried with backoff and never counted against
    a record or a request; a retriable 503 to an HTTP caller (``streams/faults.py``)."""

    code = "transient_error"
    retriable = True
    http_status = 503


class StorageUnavailable(TransientError):
    code = "storage_unavailable"


class StorageConflict(TransientError):
    """PostgreSQL rolled the transaction back (serialization failure, deadlock)."""

    code = "storage_conflict"


class BusUnavailable(TransientError):
    code = "bus_unavailable"


class DriverRejected(ContextError):
    """The database or the broker refused an operation for good: a bug of ours or data
    validation let through. Not retried; an HTTP caller gets ``internal_error``."""

    code = "driver_rejected"


class StorageRejected(DriverRejected):
    """PostgreSQL refused a statement; ``sqlstate`` says why (None: refused by the client
    library before it was sent)."""

    code = "storage_rejected"

    def __init__(self, message: str, *, sqlstate: str | None = None, **details: Any) -> None:
        super().__init__(message, sqlstate=sqlstate, **details)
        self.sqlstate = sqlstate


class BusRejected(DriverRejected):
    code = "bus_rejected"


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
