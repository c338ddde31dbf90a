"""asyncpg pool creation: JSON codecs registered once per connection."""

from __future__ import annotations

import json

import asyncpg

from schemas.errors import StorageUnavailable


async def _init(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(dsn: str, min_size: int = 2, max_size: int = 10) -> asyncpg.Pool:
    try:
        pool = await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size, init=_init)
    except (OSError, asyncpg.PostgresError) as exc:
        raise StorageUnavailable(f"cannot connect to PostgreSQL: {exc}", dsn_host=dsn.split("@")[-1]) from exc
    assert pool is not None
    return pool
