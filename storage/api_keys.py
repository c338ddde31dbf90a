"""API keys in PostgreSQL (migration 010): create, look up, list, revoke.

Only a key's sha256 is stored; ``create_key`` returns the key itself once. A host key is
issued under the key issuer secret (``domain.auth.host_key``: the runtime signs its
events with it, docs/security.md); a user key is random.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import asyncpg

from domain.auth import Credential, KeyKind, NewKey, host_key, key_of
from domain.context.envelope import BusKey


def new_key() -> NewKey:
    """A fresh key: 16 hex id (for lookup) and 256 random bits (the secret)."""
    return key_of(secrets.token_hex(8), secrets.token_hex(32))


class _Executor(Protocol):
    async def fetchrow(self, query: str, *args: Any) -> Any: ...

    async def fetch(self, query: str, *args: Any) -> Any: ...

    async def execute(self, query: str, *args: Any) -> Any: ...


@dataclass(frozen=True)
class StoredKey:
    credential: Credential
    digest: str


@dataclass(frozen=True)
class KeyRecord:
    """A key as listed: who it is for and whether it was revoked (never its secret)."""

    key_id: str
    space_id: str
    kind: str
    actor_id: str | None
    label: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class IssuedKey:
    """A key just made: ``key`` is shown once (and never in the repr)."""

    key_id: str
    key: str = field(repr=False)
    space_id: str
    kind: KeyKind
    actor_id: str | None


async def create_key(
    db: _Executor,
    space_id: str,
    kind: KeyKind,
    actor_id: str | None = None,
    label: str = "",
    *,
    issuer: bytes | None,
) -> IssuedKey:
    """``issuer``: the key issuer secret (``streams.kafka.bus_secrets.issuer_secret``),
    required for a host key."""
    if (kind is KeyKind.USER) != (actor_id is not None):
        raise ValueError("a user key names exactly one actor; a host key names none")
    if kind is KeyKind.HOST and issuer is None:
        raise ValueError("a host key is issued under the key issuer secret")
    fresh = new_key()
    if kind is KeyKind.HOST and issuer is not None:
        fresh = host_key(fresh.key_id, issuer)
    await db.execute(
        "INSERT INTO api_keys (key_id, key_sha256, space_id, kind, actor_id, label)"
        " VALUES ($1,$2,$3,$4,$5,$6)",
        fresh.key_id,
        fresh.digest,
        space_id,
        kind.value,
        actor_id,
        label,
    )
    return IssuedKey(fresh.key_id, fresh.key, space_id, kind, actor_id)


async def find_key(db: _Executor, key_id: str) -> StoredKey | None:
    """A live (not revoked) key by id."""
    r = await db.fetchrow(
        "SELECT key_id, key_sha256, space_id, kind, actor_id FROM api_keys"
        " WHERE key_id=$1 AND revoked_at IS NULL",
        key_id,
    )
    if r is None:
        return None
    cred = Credential(r["key_id"], r["space_id"], KeyKind(r["kind"]), r["actor_id"])
    return StoredKey(cred, r["key_sha256"])


async def revoke_key(db: _Executor, key_id: str) -> bool:
    r = await db.fetchrow(
        "UPDATE api_keys SET revoked_at=now() WHERE key_id=$1 AND revoked_at IS NULL"
        " RETURNING key_id",
        key_id,
    )
    return r is not None


async def list_keys(db: _Executor, space_id: str | None = None) -> list[KeyRecord]:
    rows = await db.fetch(
        "SELECT key_id, space_id, kind, actor_id, label, created_at, revoked_at FROM api_keys"
        " WHERE $1::text IS NULL OR space_id=$1 ORDER BY created_at",
        space_id,
    )
    return [KeyRecord(**dict(r)) for r in rows]


async def issue(
    dsn: str,
    space_id: str,
    kind: KeyKind,
    actor_id: str | None = None,
    label: str = "",
    *,
    issuer: bytes | None,
) -> IssuedKey:
    """One key over a short-lived connection (the CLI, the demo, benchmarks, tests)."""
    conn = await asyncpg.connect(dsn)
    try:
        return await create_key(conn, space_id, kind, actor_id, label, issuer=issuer)
    finally:
        await conn.close()


async def bus_keys(db: _Executor, key_ids: Sequence[str]) -> dict[str, BusKey]:
    """The live keys among ``key_ids``, as the processor checks a signed envelope (their
    space and kind; the processor needs no digest)."""
    rows = await db.fetch(
        "SELECT key_id, space_id, kind FROM api_keys"
        " WHERE key_id = ANY($1::text[]) AND revoked_at IS NULL",
        list(key_ids),
    )
    return {r["key_id"]: BusKey(r["space_id"], r["kind"]) for r in rows}


class PgBusKeys:
    """``streams.envelopes.BusKeys`` over a pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def bus_keys(self, key_ids: Sequence[str]) -> dict[str, BusKey]:
        async with self.pool.acquire() as conn:
            return await bus_keys(conn, key_ids)
