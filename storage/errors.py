"""What an asyncpg error means to us: the translation table from the driver's exceptions
to ours (``schemas/errors.py``). Connections of ``storage.pool`` raise the translated
error (``raise ... from`` the driver's); ``streams.faults`` applies the same table to a
driver error that reached it untranslated (a connection opened elsewhere, a fake).
"""

from __future__ import annotations

import asyncpg

from schemas.errors import ContextError, StorageConflict, StorageRejected, StorageUnavailable

# What the client library raises: PostgreSQL's errors and its own.
DRIVER_ERRORS: tuple[type[Exception], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)


def _name(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def pg_error(exc: BaseException) -> ContextError | None:
    """Our error for an asyncpg error; None for anything else. In order: a cancelled
    statement (a statement timeout: it would time out again) is rejected; a rolled-back
    transaction conflicts; a lost connection, a server shutting down or out of resources
    is unavailable; any other server error is rejected with its SQLSTATE."""
    if isinstance(exc, asyncpg.QueryCanceledError):
        return StorageRejected(_name(exc), sqlstate=exc.sqlstate)
    if isinstance(exc, asyncpg.exceptions.TransactionRollbackError):  # serialization, deadlock
        return StorageConflict(_name(exc), sqlstate=exc.sqlstate)
    if isinstance(
        exc,
        asyncpg.PostgresConnectionError
        | asyncpg.exceptions.OperatorInterventionError  # admin shutdown, cannot connect now
        | asyncpg.exceptions.InsufficientResourcesError,  # too many connections, disk full
    ):
        return StorageUnavailable(f"database unavailable: {_name(exc)}", sqlstate=exc.sqlstate)
    if isinstance(exc, asyncpg.PostgresError):
        return StorageRejected(_name(exc), sqlstate=exc.sqlstate)
    if isinstance(exc, asyncpg.InterfaceError):
        # "connection is closed", "pool is closing": the connection died under us. Any
        # other (an argument it cannot encode, two operations at once) is ours.
        if "clos" in str(exc):
            return StorageUnavailable(f"database unavailable: {_name(exc)}")
        return StorageRejected(_name(exc))
    if isinstance(exc, asyncpg.InternalClientError):
        # A pooled connection broken by a server restart mid-operation ("cannot switch
        # to state ..."), or a plan outdated by a schema change: a new attempt succeeds.
        return StorageUnavailable(f"database unavailable: {_name(exc)}")
    return None
