"""How a prepared context is stored (issue 37): every prepare writes its whole context for
the gateway's final check (R10.5), so its compression is on the hot path — lz4 where the
database server has it (``storage/migrations/027_prepared_lz4.sql``), pglz otherwise."""

from __future__ import annotations

import asyncio

import asyncpg
import orjson
import pytest

from storage.calls.prepared_body import body_of
from storage.calls.prepared_contexts import PgPreparedContexts
from tests.support.flows import PROFILE, client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration


async def stored_row(db: asyncpg.Pool, prepared_id: str) -> asyncpg.Record:
    """The stored context's row as it is kept (it is written behind the answer): its
    body's compression, the base it names, how much of that base comes first and the
    length of its own body."""
    for _ in range(200):
        row = await db.fetchrow(
            "SELECT pg_column_compression(body) AS method, base_id, base_bytes,"
            " length(body) AS own FROM prepared_contexts WHERE prepared_id=$1",
            prepared_id,
        )
        if row is not None:
            return row
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
    method = (await stored_row(db, prepared["prepared_id"]))["method"]
    assert method == ("lz4" if has_lz4 else "pglz")


# The large values the hot paths write besides a prepared context (migration 032).
LZ4_COLUMNS = {
    "summary_revisions": ("summary", "summary_text", "covered_record_ids"),
    "compaction_operations": ("outcome",),
    "records": ("content_inline", "payload"),
    "render_states": ("state",),
    "blobs": ("content",),
}


@pytest.mark.spec("R11.7", "R15.3")
async def test_the_hot_paths_large_values_are_compressed_with_lz4_where_the_server_has_it(
    db: asyncpg.Pool,
) -> None:
    has_lz4 = await db.fetchval(
        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
    )
    for table, columns in LZ4_COLUMNS.items():
        rows = await db.fetch(
            "SELECT attname, attcompression FROM pg_attribute"
            " WHERE attrelid = $1::regclass AND attname = ANY($2::text[])",
            table,
            list(columns),
        )
        assert {r["attname"] for r in rows} == set(columns), (table, rows)
        for r in rows:  # b"l": lz4; b"\x00" (the server's default, pglz) without it
            assert r["attcompression"] == (b"l" if has_lz4 else b"\x00"), (table, dict(r))


@pytest.mark.spec("R10.5")
async def test_a_large_threads_next_context_is_stored_as_what_it_adds_and_read_whole(
    services: Services, db: asyncpg.Pool
) -> None:
    """A context over 64 KB whose thread's last one was stored whole is stored as the bytes
    after what they share; every reader rebuilds it in SQL, and pruning keeps the base
    while a context names it."""
    async with client(services) as c:
        wide = PROFILE | {"context_capacity": 128_000}
        run = await c.start_run(await new_session(c, model_profile=wide))
        long = "\n".join(f"line {i}: the measured value was {i * 13}" for i in range(3000))
        await c.append_user(run, f"Read this log:\n{long}", "q1")
        first = await c.prepare(run)
        assert (await stored_row(db, first["prepared_id"]))["base_id"] is None
        await c.append_user(run, "And one more thing.", "q2", supplement=True)
        second = await c.prepare(run)
    row = await stored_row(db, second["prepared_id"])
    assert row["base_id"] == first["prepared_id"] and row["own"] < 8192 < row["base_bytes"]
    contexts = PgPreparedContexts(db)
    for p in (first, second):
        stored = await contexts.load(p["prepared_id"])
        assert stored is not None
        whole = orjson.loads(stored.body)
        assert whole["ids"][0] == p["prepared_id"] and whole["messages"] == p["messages"]
    async with db.acquire() as conn:
        assert await body_of(conn, second["prepared_id"]) == stored.body
    # The base is older than the retention, the delta is not: the base stays.
    await db.execute(
        "UPDATE prepared_contexts SET created_at = now() - interval '1 hour' WHERE prepared_id=$1",
        first["prepared_id"],
    )
    assert await contexts.prune(older_than_s=600) == 0
    assert await contexts.load(second["prepared_id"]) is not None
    await db.execute(
        "UPDATE prepared_contexts SET created_at = now() - interval '1 hour' WHERE prepared_id=$1",
        second["prepared_id"],
    )
    assert await contexts.prune(older_than_s=600) == 2  # the delta and its base
