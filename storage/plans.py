"""How PostgreSQL plans our statements.

The pools of the processor, Prepare, compaction and analytics plan a prepared statement
once per connection (``Settings.pg_plan_cache_mode``, ``force_generic_plan`` by
default), which suits
statements whose best plan is the same for any arguments: lookups by key, ranges of one
session. A statement whose best plan depends on the values it is given — how many ids
an array holds, which optional filters are set — runs in a transaction that asks for a
plan made for its arguments (``custom_plan``)."""

from __future__ import annotations

import asyncpg


async def custom_plan(conn: asyncpg.Connection) -> None:
    """Inside a transaction: plan its statements for their arguments, at each call."""
    await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
