"""How a prepared context is stored (issue 37): every prepare writes its whole context for
the gateway's final check (R10.5), so its compression is on the hot path — lz4 where the
database server has it (``storage/migrations/027_prepared_lz4.sql``), pglz otherwise."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration


async def stored_compression(db: asyncpg.Pool, prepared_id: str) -> str | None:
    """The compression of the stored context's body (it is written behind the answer)."""
    for _ in range(200):
        row = await db.fetchrow(
            "SELECT pg_column_compression(body) AS method FROM prepared_contexts"
            " WHERE prepared_id=$1",
            prepared_id,
        )
        if row is not None:
            return str(row["method"]) if row["method"] is not None else None
        await asyncio.sleep(0.05)
    raise AssertionError(f"prepared context {prepared_id} was never stored")


@pytest.mark.spec("R10.5")
async def test_a_prepared_context_is_stored_with_lz4_where_the_server_has_it(
    services: Services, db: asyncpg.Pool
) -> None:
    has_lz4 = await db.fetchval(
        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
    )
    async with client(services) as c:
        run = await c.start_run(await new_session(c))
        # Well over TOAST's ~2 KB threshold, and compressible: the body is compressed.
        rows = "\n".join(f"row {i}: total={i * 7} status=ok" for i in range(200))
        await c.append_user(run, f"Check these rows:\n{rows}", "q")
        prepared = await c.prepare(run)
    method = await stored_compression(db, prepared["prepared_id"])
    assert method == ("lz4" if has_lz4 else "pglz")
