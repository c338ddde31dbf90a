"""What the session processor reads and writes besides records and compaction rows:
which sessions exist, a run's main thread, and the outcome of an isolated record."""

from __future__ import annotations

import asyncpg


async def open_sessions(conn: asyncpg.Connection, session_ids: list[str]) -> set[str]:
    """The ids among ``session_ids`` that name an existing session."""
    rows = await conn.fetch(
        "SELECT session_id FROM sessions WHERE session_id = ANY($1::text[])", session_ids
    )
    return {r["session_id"] for r in rows}


async def main_instance_id(conn: asyncpg.Connection, session_id: str, run_id: str) -> str | None:
    """The instance id of a run's main thread (None if the run is unknown)."""
    found = await conn.fetchval(
        "SELECT main_instance_id FROM runs WHERE session_id=$1 AND run_id=$2",
        session_id,
        run_id,
    )
    return None if found is None else str(found)


async def record_dead_letter(
    conn: asyncpg.Connection,
    session_id: str,
    event_key: str,
    code: str,
    message: str,
    space_id: str,
    actor_id: str,
) -> None:
    """Remember that ``event_key`` was dead-lettered — only for a session of the event's
    own space and actor (a forged scope records nothing), and never twice."""
    await conn.execute(
        "INSERT INTO event_outcomes (session_id, event_key, outcome, code,"
        " message) SELECT session_id, $2, 'dead_letter', $3, $4 FROM sessions"
        " WHERE session_id=$1 AND space_id=$5 AND actor_id=$6"
        " ON CONFLICT DO NOTHING",
        session_id,
        event_key,
        code,
        message,
        space_id,
        actor_id,
    )
