"""What the session processor reads and writes besides records and compaction rows:
which sessions exist, a run's main thread, and the outcome of an isolated record."""

from __future__ import annotations

import asyncpg


async def main_instance_id(conn: asyncpg.Connection, session_id: str, run_id: str) -> str | None:
    """The instance id of a run's main thread (None if the run is unknown)."""
    found = await conn.fetchval(
        "SELECT main_instance_id FROM runs WHERE session_id=$1 AND run_id=$2",
        session_id,
        run_id,
    )
    return None if found is None else str(found)
