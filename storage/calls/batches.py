"""Deleting old rows in batches (prepared contexts, render states)."""

from __future__ import annotations

import asyncpg


async def delete_in_batches(pool: asyncpg.Pool, sql: str, older_than_s: float, batch: int) -> int:
    """Run ``sql`` (``$1`` the age in seconds, ``$2`` the batch size; it returns how many
    rows it deleted) until a round deletes fewer than ``batch``. One short transaction
    per round: a large backlog never holds locks (or a long-running DELETE) against the
    writers inserting meanwhile. Returns the total."""
    total = 0
    while True:
        deleted = int(await pool.fetchval(sql, older_than_s, batch) or 0)
        total += deleted
        if deleted < batch:
            return total
