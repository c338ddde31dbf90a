"""asyncpg pool creation: JSON codecs registered once per connection."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from schemas.errors import StorageUnavailable


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


class _Connection(asyncpg.Connection):  # type: ignore[misc]
    def get_reset_query(self) -> str:
        # We keep no session state on pooled connections (LISTEN uses its own
        # connection), so skip the RESET ALL round trip on every release.
        return ""


async def create_pool(dsn: str, min_size: int = 2, max_size: int = 10) -> asyncpg.Pool:
    try:
        pool = await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, init=_init, connection_class=_Connection
        )
    except (OSError, asyncpg.PostgresError) as exc:
        raise StorageUnavailable(
            f"cannot connect to PostgreSQL: {exc}", dsn_host=dsn.split("@")[-1]
        ) from exc
    assert pool is not None
    return pool
