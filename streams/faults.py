"""The fault policy: one module decides, from our error types (``schemas/errors.py``),
what every consumer does with a failure — the processor, the compaction service and
Prepare's HTTP answers.

- *Transient* (``TransientError``: connection loss, a serialization failure or
  deadlock, the database shutting down or out of resources, a retriable or unreachable
  broker) is retried with one backoff (``retry_transient``) and never counted against a
  record or a request; to an HTTP caller it is a retriable 503.
- Anything else is the record's or the request's fault: dead-lettered (the processor),
  counted toward quarantine (the compaction service), or the route's own answer; a
  refusal of the database or the broker (``DriverRejected``) is a 500 logged with its id.

The adapters translate at their boundary (``storage.pool``'s connections raise ours);
a driver error that arrives untranslated is classified through the same tables
(``storage.errors``, ``streams.kafka.errors``), and so is a raw socket error.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

from schemas.errors import (
    ContextError,
    DriverRejected,
    StorageRejected,
    StorageUnavailable,
    TransientError,
)
from storage import errors as pg
from streams.kafka import errors as kafka

log = logging.getLogger("agentloom.faults")
_T = TypeVar("_T")

# Every driver exception class the policy classifies (the HTTP layer installs a handler
# for each): asyncpg's, aiokafka's and the socket's.
DRIVER_ERRORS: tuple[type[Exception], ...] = (*pg.DRIVER_ERRORS, *kafka.DRIVER_ERRORS, OSError)

# Local file system errors are not the network's: a bug or a deployment's, not retried.
_LOCAL_OS_ERRORS = (
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


def classify(exc: BaseException) -> ContextError | None:
    """``exc`` as one of our errors: itself if it is one, the translation of a driver or
    socket error, None for anything else (a bug, or a worker's own exception)."""
    if isinstance(exc, ContextError):
        return exc
    ours = pg.pg_error(exc) or kafka.kafka_error(exc)
    if ours is None and isinstance(exc, OSError) and not isinstance(exc, _LOCAL_OS_ERRORS):
        # Refused, reset, broken pipe, name resolution, timeouts (TimeoutError is one).
        ours = StorageUnavailable(f"connection lost: {type(exc).__name__}: {exc}")
    return ours


def is_transient(exc: BaseException) -> bool:
    """Infrastructure that will come back, or a conflict a second attempt resolves."""
    return isinstance(classify(exc), TransientError)


async def retry_transient(fn: Callable[[], Awaitable[_T]], within_s: float) -> _T:
    """``fn()`` retried with exponential backoff (0.2 s doubling, at most 5 s apart) while
    it fails transiently, for at most ``within_s`` seconds; the last error (or any other)
    is raised as it was."""
    retrying = AsyncRetrying(
        retry=retry_if_exception(is_transient),
        wait=wait_exponential(multiplier=0.2, max=5),
        stop=stop_after_delay(within_s),
        before_sleep=before_sleep_log(log, logging.WARNING),
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            return await fn()
    raise AssertionError("unreachable: tenacity re-raises the last error")


def http_answer(exc: BaseException) -> ContextError | None:
    """What an HTTP caller is told about ``exc``: our error (a driver's translated), or
    None for a bug or a refusal of the database or broker — the caller did nothing wrong
    and can do nothing about it: a 500 ``internal_error``, logged with an id."""
    ours = classify(exc)
    return None if ours is None or isinstance(ours, DriverRejected) else ours


def http_status(exc: BaseException) -> int:
    answer = http_answer(exc)
    return 500 if answer is None else answer.http_status


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """(reason_code, reason) of a non-transient failure to apply one event: what its dead
    letter says. ``storage_rejected`` when PostgreSQL refused it (SQLSTATE in the
    reason), ``apply_failed`` for any other exception."""
    ours = classify(exc)
    if isinstance(ours, StorageRejected):
        driver = exc.__cause__ if exc is ours and exc.__cause__ is not None else exc
        detail = f"{type(driver).__name__} (SQLSTATE {ours.sqlstate or '?'}): {driver}"
        return "storage_rejected", detail[:2000]
    return "apply_failed", f"{type(exc).__name__}: {exc}"[:2000]
