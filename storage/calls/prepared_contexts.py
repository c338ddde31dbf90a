"""Prepared contexts held for the gateway's final check (R10.5): stored so that
any Prepare instance can check a call for a context another instance prepared.

The body is opaque here (the service owns its wire mapping, services/prepare/assembly/prepared.py).
Retention is bounded: ``prune`` deletes rows older than a given age (migration 012).
A row also names its purpose and lineage (migration 026), so the compaction service can
read a thread's newest action context (storage/calls/agent_contexts.py). A large body may
be stored as what it adds to an earlier context's (migration 031): every reader reads it
whole through ``BODY``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

import asyncpg

from storage.calls.batches import delete_in_batches
from storage.calls.prepared_body import BODY


@dataclass(frozen=True)
class PreparedRow:
    """One prepared context to store (``PreparedContexts.save``'s arguments); with
    ``base_id``, ``body`` is what follows the first ``base_bytes`` of that context's body
    (stored whole, and written before or with this one)."""

    prepared_id: str
    session_id: str
    run_id: str
    body: bytes
    purpose: str | None = None
    lineage: str | None = None
    base_id: str | None = None
    base_bytes: int | None = None


@dataclass(frozen=True)
class StoredPrepared:
    prepared_id: str
    session_id: str
    run_id: str
    body: bytes


class PreparedContexts(Protocol):
    """Port: the prepared contexts of every Prepare instance."""

    async def save(
        self,
        prepared_id: str,
        session_id: str,
        run_id: str,
        body: bytes,
        purpose: str | None = None,
        lineage: str | None = None,
    ) -> None:
        """Store one (ids are fresh per prepare: a second save of one id changes nothing);
        ``lineage``: "main" for a session's main thread, else the child instance id."""

    async def save_many(self, rows: list[PreparedRow]) -> None:
        """``save`` of each, in one statement."""

    async def load(self, prepared_id: str) -> StoredPrepared | None:
        """The stored context, or None (never prepared, or pruned)."""

    async def prune(self, older_than_s: float, batch: int = 5000) -> int:
        """Delete contexts older than ``older_than_s``; how many were deleted."""


class PgPreparedContexts:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def save(
        self,
        prepared_id: str,
        session_id: str,
        run_id: str,
        body: bytes,
        purpose: str | None = None,
        lineage: str | None = None,
    ) -> None:
        await self.pool.execute(
            "INSERT INTO prepared_contexts (prepared_id, session_id, run_id, body, purpose,"
            " lineage) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (prepared_id) DO NOTHING",
            prepared_id,
            session_id,
            run_id,
            body,
            purpose,
            lineage,
        )

    async def save_many(self, rows: list[PreparedRow]) -> None:
        cols = list(zip(*(dataclasses.astuple(r) for r in rows), strict=True))
        await self.pool.execute(
            # created_at per row, in the rows' order (now() is one time for the whole
            # statement): the newest of a thread's contexts is the last one remembered.
            "INSERT INTO prepared_contexts (prepared_id, session_id, run_id, body, purpose,"
            " lineage, base_id, base_bytes, created_at) SELECT u.a, u.b, u.c, u.d, u.e, u.f,"
            " u.g, u.h, clock_timestamp() + u.n * interval '1 microsecond' FROM"
            " unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::text[],"
            " $7::text[], $8::integer[]) WITH ORDINALITY AS u(a, b, c, d, e, f, g, h, n)"
            " ON CONFLICT (prepared_id) DO NOTHING",
            *(list(c) for c in cols),
        )

    async def load(self, prepared_id: str) -> StoredPrepared | None:
        row = await self.pool.fetchrow(
            f"SELECT prepared_id, session_id, run_id, {BODY} AS body FROM prepared_contexts p"
            " WHERE prepared_id=$1",
            prepared_id,
        )
        return None if row is None or row["body"] is None else StoredPrepared(**dict(row))

    async def prune(self, older_than_s: float, batch: int = 5000) -> int:
        return await delete_in_batches(
            self.pool,
            # A context another one names as its base stays while that one is kept.
            "WITH old AS (SELECT prepared_id FROM prepared_contexts o"
            " WHERE created_at < now() - make_interval(secs => $1) AND NOT EXISTS"
            " (SELECT 1 FROM prepared_contexts d WHERE d.base_id = o.prepared_id"
            "  AND d.created_at >= now() - make_interval(secs => $1)) LIMIT $2)"
            " , gone AS (DELETE FROM prepared_contexts p USING old"
            " WHERE p.prepared_id = old.prepared_id RETURNING 1)"
            " SELECT count(*) FROM gone",
            older_than_s,
            batch,
        )
