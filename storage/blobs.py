"""The content store (R3.4) and reading records back by id (R11.8, R13.2, R15.3).

Blobs are content-addressed and immutable, and keyed by tenant space: a space
reads only the blobs it stored, and another space's hash is not found exactly like a hash
nobody stored (one query by ``(space_id, sha256)`` for both). A record is read back with
its content whole (inline or from its own space's blob) and whether its resource was
revoked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg

from storage.records.threads import child_transfer


@dataclass(frozen=True)
class StoredRecord:
    """A record as read back: its content whole, and whether its resource is revoked."""

    record_id: str
    session_sequence: int
    run_id: str | None
    instance_id: str | None
    kind: str
    authority: str
    visibility: str
    payload: Any
    content_sha256: str | None
    text: str | None
    resource_ref: str | None
    revoked: bool
    retracted_by: str | None = None  # the retraction's record id, if any


@dataclass(frozen=True)
class RecordScope:
    """Whose a record is: enough to decide a thread's read (R13.2)."""

    visibility: str
    run_id: str | None
    instance_id: str | None


class Blobs(Protocol):
    """Port: the content store."""

    async def put(
        self, space_id: str, sha256: str, data: bytes, media_type: str, tokens: int, method: str
    ) -> None:
        """Idempotent: the same content is stored once per space."""

    async def text(self, space_id: str, sha256: str) -> str | None:
        """A blob the space stored, decoded as UTF-8."""


class Records(Protocol):
    """Port: records read back by id."""

    async def read(self, session_id: str, record_id: str) -> StoredRecord | None: ...

    async def scope(self, session_id: str, record_id: str) -> RecordScope | None: ...

    async def transfer(self, session_id: str, run_id: str, instance_id: str) -> list[str]:
        """The record ids a parent exported to this child thread (R13.2)."""


class PgBlobs:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def put(
        self, space_id: str, sha256: str, data: bytes, media_type: str, tokens: int, method: str
    ) -> None:
        await self.pool.execute(
            "INSERT INTO blobs (space_id, sha256, content, length, media_type, token_count,"
            " token_method) VALUES ($1,$2,$3,$4,$5,$6,$7)"
            " ON CONFLICT (space_id, sha256) DO NOTHING",
            space_id,
            sha256,
            data,
            len(data),
            media_type,
            tokens,
            method,
        )

    async def text(self, space_id: str, sha256: str) -> str | None:
        text: str | None = await self.pool.fetchval(
            "SELECT convert_from(content, 'UTF8') FROM blobs WHERE space_id=$1 AND sha256=$2",
            space_id,
            sha256,
        )
        return text


class PgRecords:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def read(self, session_id: str, record_id: str) -> StoredRecord | None:
        r = await self.pool.fetchrow(
            "SELECT r.record_id, r.session_sequence, r.run_id, r.instance_id, r.kind,"
            " r.authority, r.visibility, r.payload, r.content_sha256,"
            " COALESCE(r.content_inline, convert_from(b.content, 'UTF8')) AS text,"
            " r.resource_ref, EXISTS (SELECT 1 FROM revoked_resources v WHERE"
            "  v.session_id = r.session_id AND v.resource_id = r.resource_ref) AS revoked,"
            " (SELECT rx.record_id FROM records rx WHERE rx.session_id = r.session_id"
            "  AND rx.kind = 'record_retracted' AND rx.operation_id = r.record_id)"
            "  AS retracted_by"
            " FROM records r LEFT JOIN blobs b"
            "  ON b.space_id = r.space_id AND b.sha256 = r.content_ref"
            " WHERE r.session_id=$1 AND r.record_id=$2",
            session_id,
            record_id,
        )
        return None if r is None else StoredRecord(**dict(r))

    async def scope(self, session_id: str, record_id: str) -> RecordScope | None:
        r = await self.pool.fetchrow(
            "SELECT visibility, run_id, instance_id FROM records"
            " WHERE session_id=$1 AND record_id=$2",
            session_id,
            record_id,
        )
        return None if r is None else RecordScope(**dict(r))

    async def transfer(self, session_id: str, run_id: str, instance_id: str) -> list[str]:
        async with self.pool.acquire() as conn:
            return await child_transfer(conn, session_id, run_id, instance_id)
