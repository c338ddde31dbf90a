"""Console sessions in PostgreSQL (migration 023): what a browser's opaque cookie id
stands for, so any console instance can serve it and logout ends it everywhere.

A session ends at the first of: logout, ``idle_s`` without a request, ``max_s`` after
sign-in. Expired rows are deleted at every sign-in, so the table stays bounded by the
sessions alive within ``max_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from services.console import sealing


@dataclass(frozen=True)
class SessionStore:
    pool: asyncpg.Pool
    idle_s: float
    max_s: float

    async def open(self, api_key: str) -> str:
        """A new session for ``api_key``: its id, for the cookie and nothing else."""
        session_id = sealing.new_id()
        async with self.pool.acquire() as conn:
            await conn.execute(
                "DELETE FROM console_sessions WHERE expires_at < now()"
                " OR seen_at < now() - make_interval(secs => $1)",
                self.idle_s,
            )
            await conn.execute(
                "INSERT INTO console_sessions (id_hash, sealed_key, expires_at)"
                " VALUES ($1, $2, now() + make_interval(secs => $3))",
                sealing.id_hash(session_id),
                sealing.seal(session_id, api_key),
                self.max_s,
            )
        return session_id

    async def key_of(self, session_id: str) -> str | None:
        """The API key of a live session (and it is seen now), else None."""
        row = await self.pool.fetchrow(
            "UPDATE console_sessions SET seen_at = now()"
            " WHERE id_hash = $1 AND expires_at > now()"
            " AND seen_at > now() - make_interval(secs => $2)"
            " RETURNING sealed_key",
            sealing.id_hash(session_id),
            self.idle_s,
        )
        return None if row is None else sealing.unseal(session_id, bytes(row["sealed_key"]))

    async def close(self, session_id: str) -> None:
        await self.pool.execute(
            "DELETE FROM console_sessions WHERE id_hash = $1", sealing.id_hash(session_id)
        )
