"""How PostgreSQL plans our statements.

The pools of the processor, Prepare, compaction and analytics plan a prepared statement
once per connection (``Settings.pg_plan_cache_mode``, ``force_generic_plan`` by
default), which suits statements whose best plan is the same for any arguments: lookups
by key, ranges of one session. A statement whose best plan depends on the values it is
given — how many ids an array holds, which optional filters are set — runs inside
``custom_plan``, which plans it for its arguments at each call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg


@asynccontextmanager
async def custom_plan(conn: asyncpg.Connection) -> AsyncIterator[None]:
    """A transaction (a savepoint inside the caller's) whose statements are planned for
    their arguments. ``SET LOCAL`` lasts to the end of the outermost transaction, not of
    a savepoint: inside the caller's transaction the connection's own mode is set back
    at the end, or every later statement of the caller's (the processor's whole batch)
    would be planned again at each call too."""
    nested = conn.is_in_transaction()
    async with conn.transaction():
        await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        yield
        if nested:  # DEFAULT: the connection's value (the pool's startup setting)
            await conn.execute("SET LOCAL plan_cache_mode = DEFAULT")
