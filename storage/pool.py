"""asyncpg pool creation: JSON codecs registered once per connection, and the storage's
error boundary: a pooled connection's queries (and so its transactions' commits and
rollbacks) raise our errors (``storage.errors.pg_error``), the driver's as their cause."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import asyncpg
import orjson

from schemas.errors import StorageUnavailable
from schemas.settings import PlanCacheMode
from storage.errors import DRIVER_ERRORS, pg_error

# What a query on a pooled connection may raise untranslated by the driver: its own
# errors and a socket's (an OSError; TimeoutError is one).
_TRANSLATED: tuple[type[Exception], ...] = (*DRIVER_ERRORS, OSError)


def _encode_jsonb(value: Any) -> bytes:
    # Binary jsonb wire format = version byte 1 + JSON text. Binary (not text) because
    # COPY, used for batched record inserts, only speaks the binary format.
    return b"\x01" + orjson.dumps(value)


def _decode_jsonb(data: bytes) -> Any:
    return orjson.loads(data[1:])


async def _init(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec(
        "jsonb", encoder=_encode_jsonb, decoder=_decode_jsonb, schema="pg_catalog", format="binary"
    )


def _raise_ours(exc: BaseException) -> NoReturn:
    raise (pg_error(exc) or StorageUnavailable(f"database unreachable: {exc!r}")) from exc


class _Connection(asyncpg.Connection):  # type: ignore[misc]
    def get_reset_query(self) -> str:
        # We keep no session state on pooled connections (LISTEN uses its own
        # connection), so skip the RESET ALL round trip on every release.
        return ""


def _translating(name: str) -> Callable[..., Awaitable[Any]]:
    """The connection's ``name`` query method, raising our errors."""
    query = getattr(asyncpg.Connection, name)

    async def method(self: asyncpg.Connection, *args: Any, **kw: Any) -> Any:
        try:
            return await query(self, *args, **kw)
        except _TRANSLATED as exc:
            _raise_ours(exc)

    method.__name__ = method.__qualname__ = name
    return method


# The query methods storage calls; Transaction commits and rolls back through ``execute``,
# so a serialization failure at COMMIT is translated too.
for _name in (
    "execute",
    "executemany",
    "fetch",
    "fetchrow",
    "fetchval",
    "fetchmany",
    "copy_records_to_table",
):
    setattr(_Connection, _name, _translating(_name))


async def create_pool(
    dsn: str, min_size: int = 2, max_size: int = 10, *, plan_cache_mode: PlanCacheMode = "auto"
) -> asyncpg.Pool:
    """A pool whose connections raise our errors; ``plan_cache_mode`` is PostgreSQL's
    setting of that name on each connection (``Settings.pg_plan_cache_mode``)."""
    try:
        pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            init=_init,
            connection_class=_Connection,
            server_settings={"plan_cache_mode": plan_cache_mode},
        )
    except (OSError, asyncpg.PostgresError) as exc:
        raise StorageUnavailable(
            f"cannot connect to PostgreSQL: {exc}", dsn_host=dsn.split("@")[-1]
        ) from exc
    assert pool is not None
    return pool
