"""Stored thread render states (cold prepare): bytes from
``domain.context.render_state``, one row per thread, so any Prepare instance continues a view
from where the last one stored it instead of rendering the whole history again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import asyncpg

from storage.calls.batches import delete_in_batches


@dataclass(frozen=True)
class StoredState:
    last_sequence: int
    data: bytes


class RenderStates(Protocol):
    """Port: a cache of thread render states; losing one only costs a full render."""

    async def load(
        self, session_id: str, run_id: str, instance_id: str, fingerprint: str
    ) -> StoredState | None: ...

    async def save(
        self, session_id: str, run_id: str, instance_id: str, fingerprint: str, state: StoredState
    ) -> None: ...

    async def prune(self, older_than_s: float, batch: int = 5000) -> int:
        """Delete the states not saved for ``older_than_s``; returns how many."""
        ...


class PgRenderStates:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def load(
        self, session_id: str, run_id: str, instance_id: str, fingerprint: str
    ) -> StoredState | None:
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT last_sequence, state FROM render_states WHERE session_id=$1"
                " AND run_id=$2 AND instance_id=$3 AND fingerprint=$4",
                session_id,
                run_id,
                instance_id,
                fingerprint,
            )
        return None if row is None else StoredState(row["last_sequence"], bytes(row["state"]))

    async def save(
        self, session_id: str, run_id: str, instance_id: str, fingerprint: str, state: StoredState
    ) -> None:
        # Two instances may save the same thread: a state of the same fingerprint only
        # replaces an older one; another fingerprint (a new summary or revocation epoch)
        # replaces it outright — the old one no longer describes the current view.
        async with self.pool.acquire() as conn:
            await conn.execute(
                "INSERT INTO render_states AS s"
                " (session_id, run_id, instance_id, fingerprint, last_sequence, state)"
                " VALUES ($1, $2, $3, $4, $5, $6)"
                " ON CONFLICT (session_id, run_id, instance_id) DO UPDATE SET"
                " fingerprint = excluded.fingerprint, last_sequence = excluded.last_sequence,"
                " state = excluded.state, saved_at = now()"
                " WHERE s.fingerprint <> excluded.fingerprint"
                " OR s.last_sequence < excluded.last_sequence",
                session_id,
                run_id,
                instance_id,
                fingerprint,
                state.last_sequence,
                state.data,
            )

    async def prune(self, older_than_s: float, batch: int = 5000) -> int:
        # Views idle that long (finished runs, abandoned sessions) hold content nobody
        # prepares any more.
        return await delete_in_batches(
            self.pool,
            "WITH old AS (SELECT session_id, run_id, instance_id FROM render_states"
            " WHERE saved_at < now() - make_interval(secs => $1) LIMIT $2)"
            " , gone AS (DELETE FROM render_states s USING old"
            " WHERE (s.session_id, s.run_id, s.instance_id)"
            " = (old.session_id, old.run_id, old.instance_id) RETURNING 1)"
            " SELECT count(*) FROM gone",
            older_than_s,
            batch,
        )


class MemoryRenderStates:
    """In-memory ``RenderStates`` with the same replacement rule (unit tests, benchmarks)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str], tuple[str, StoredState]] = {}
        self.saves = 0

    async def load(
        self, session_id: str, run_id: str, instance_id: str, fingerprint: str
    ) -> StoredState | None:
        row = self.rows.get((session_id, run_id, instance_id))
        return row[1] if row is not None and row[0] == fingerprint else None

    async def save(
        self, session_id: str, run_id: str, instance_id: str, fingerprint: str, state: StoredState
    ) -> None:
        key = (session_id, run_id, instance_id)
        old = self.rows.get(key)
        if old is None or old[0] != fingerprint or old[1].last_sequence < state.last_sequence:
            self.rows[key] = (fingerprint, state)
            self.saves += 1

    async def prune(self, older_than_s: float, batch: int = 5000) -> int:
        gone = len(self.rows)
        self.rows.clear()  # no clock here: tests prune "everything older than now"
        return gone
