"""Faults: which failures are the infrastructure's, how long the processor waits for it,
and what a dead letter says about the others.

The split decides what happens to a batch (docs/design-notes.md, "Effectively-once"):
a *transient* failure — connection loss, a serialization failure or deadlock, the
database shutting down or out of resources, a retriable broker error — is retried with
backoff, the same batch again (redelivery is a no-op for what did commit); anything
else is the record's fault and is isolated and dead-lettered, never retried forever.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from tenacity import (
    AsyncRetrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

log = logging.getLogger("agentloom.processor")
_T = TypeVar("_T")


def is_transient(exc: BaseException) -> bool:
    """Infrastructure that will come back, or a conflict a second attempt resolves."""
    if isinstance(exc, KafkaError):
        return bool(exc.retriable) or isinstance(exc, KafkaConnectionError | KafkaTimeoutError)
    if isinstance(exc, asyncpg.QueryCanceledError):
        return False  # a statement cancelled for taking too long: the input's fault
    if isinstance(exc, asyncpg.InterfaceError):
        return "closed" in str(exc)  # a connection that died under us
    return isinstance(
        exc,
        OSError  # ConnectionError (refused, reset, broken pipe), socket errors
        | socket.gaierror
        | TimeoutError
        | asyncpg.PostgresConnectionError
        | asyncpg.exceptions.OperatorInterventionError  # admin shutdown, cannot connect now
        | asyncpg.exceptions.InsufficientResourcesError  # too many connections, disk full
        | asyncpg.exceptions.TransactionRollbackError  # serialization failure, deadlock
        | asyncpg.InternalClientError,  # a pooled connection broken by a server restart
    )


async def retry_transient(fn: Callable[[], Awaitable[_T]], within_s: float) -> _T:
    """``fn()`` retried with exponential backoff while it fails transiently, for at most
    ``within_s`` seconds; the last error (or any other) is raised."""
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


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """(reason_code, reason) of a non-transient failure to apply one event: what its dead
    letter says. ``storage_rejected`` when PostgreSQL refused it (SQLSTATE in the
    reason), ``apply_failed`` for any other exception."""
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None) or "?"
        return "storage_rejected", f"{type(exc).__name__} (SQLSTATE {state}): {exc}"[:2000]
    return "apply_failed", f"{type(exc).__name__}: {exc}"[:2000]
