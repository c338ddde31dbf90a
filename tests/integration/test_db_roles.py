"""Each service's database login on the real PostgreSQL (issue 38 item 3,
storage/roles.py): the migration tool created and granted it; it is refused every table
it has no grant on (reading and writing), and any write to a table it only reads — the
analytics login reads no key, the processor's no key digest."""

from __future__ import annotations

import asyncpg
import pytest

from storage.roles import PLAN, role_dsn
from tests.support.services import Services

pytestmark = pytest.mark.spec("R15.4")


async def _refused(conn: asyncpg.Connection, sql: str) -> bool:
    try:
        await conn.execute(sql)
    except asyncpg.InsufficientPrivilegeError:
        return True
    return False


@pytest.mark.parametrize("role", sorted(PLAN))
async def test_a_login_is_refused_every_table_it_has_no_grant_on(
    role: str, pg_dsn: str, db: asyncpg.Pool, services: Services
) -> None:
    tables = {
        r["tablename"]
        for r in await db.fetch("SELECT tablename FROM pg_tables WHERE schemaname='public'")
    }
    grants = PLAN[role]
    conn = await asyncpg.connect(role_dsn(pg_dsn, role))
    try:
        assert await conn.fetchval("SELECT current_user") == f"alc_{role}"
        for t in sorted(tables):
            readable = t in grants.reads | grants.writes
            assert await _refused(conn, f'SELECT * FROM "{t}" LIMIT 0') is not readable, t
            if t not in grants.writes:  # the permission check comes before any row
                assert await _refused(conn, f'INSERT INTO "{t}" DEFAULT VALUES'), t
                assert await _refused(conn, f'DELETE FROM "{t}"'), t
        for t, columns in grants.columns.items():
            listed = ", ".join(columns)
            assert not await _refused(conn, f'SELECT {listed} FROM "{t}" LIMIT 0'), t
        assert await _refused(conn, "CREATE TABLE forbidden_ddl (x int)")  # only the owner
    finally:
        await conn.close()


async def test_analytics_reads_no_key_and_the_processor_no_key_digest(
    pg_dsn: str, services: Services
) -> None:
    analytics = await asyncpg.connect(role_dsn(pg_dsn, "analytics"))
    processor = await asyncpg.connect(role_dsn(pg_dsn, "processor"))
    try:
        assert await _refused(analytics, "SELECT key_id FROM api_keys")
        assert await _refused(processor, "SELECT key_sha256 FROM api_keys")
        live = "SELECT count(*) FROM api_keys WHERE key_id = $1 AND revoked_at IS NULL"
        key_id = services.api_key.split("_")[1]
        assert await processor.fetchval(live, key_id) == 1  # what the envelope check needs
    finally:
        await analytics.close()
        await processor.close()
