"""How a stored prepared context's body is read whole (R10.5): a large one may be stored
as what it adds to an earlier context of its thread (migration 031,
``domain.prepared.deltas``); every reader of ``prepared_contexts`` selects
``BODY`` instead of the column."""

from __future__ import annotations

import asyncpg

# The whole body of the row aliased ``p``: its own body, or the first ``base_bytes`` of
# its base's (a context stored whole) followed by its own. NULL when the base is gone (a
# reader then finds no context).
BODY = (
    "(CASE WHEN p.base_id IS NULL THEN p.body ELSE (SELECT substring(b.body FROM 1 FOR"
    " p.base_bytes) || p.body FROM prepared_contexts b WHERE b.prepared_id = p.base_id) END)"
)


async def body_of(conn: asyncpg.Connection, prepared_id: str) -> bytes | None:
    """The whole stored body of ``prepared_id``, or None (never stored, pruned, or its
    base gone)."""
    body = await conn.fetchval(
        f"SELECT {BODY} FROM prepared_contexts p WHERE prepared_id=$1", prepared_id
    )
    return None if body is None else bytes(body)
