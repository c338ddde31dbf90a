"""Versioned SQL migrations: ``storage/migrations/NNN_name.sql``, applied once, in order.

Run with ``agentloom-migrate`` (or ``python -m storage.migrate``) as the database owner.
Concurrent runners are serialised by an advisory lock, so every process may call it at
start-up safely. The owner also creates and grants the services' logins
(``storage.roles``) whenever a migration ran or their privileges differ from the plan. A
service's own login (no DDL) only checks that nothing is pending, and stops with
``migrations_pending`` if something is: the owner migrates first (``agentloom migrate``,
the Kubernetes migration Job).
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

from schemas.errors import ContextError
from storage import roles

log = logging.getLogger(__name__)
_LOCK_KEY = 0x41_4C_43  # "ALC": one advisory lock for all migration runners
_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available() -> list[Migration]:
    out = []
    for entry in resources.files("storage").joinpath("migrations").iterdir():
        m = _NAME.match(entry.name)
        if m:
            out.append(Migration(int(m.group(1)), m.group(2), entry.read_text("utf-8")))
    return sorted(out, key=lambda m: m.version)


class MigrationsPending(ContextError):
    """A login that may not migrate found migrations pending."""

    code = "migrations_pending"
    retriable = True
    http_status = 503


async def _owner(conn: asyncpg.Connection) -> bool:
    """Whether this login may migrate: a superuser, or the owner of the schema."""
    return bool(
        await conn.fetchval(
            "SELECT rolsuper OR pg_has_role(current_user, n.nspowner, 'USAGE')"
            " FROM pg_roles, pg_namespace n WHERE rolname = current_user AND n.nspname = 'public'"
        )
    )


async def apply(conn: asyncpg.Connection) -> list[int]:
    """Apply pending migrations and the logins' grants; return the versions applied now."""
    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        owner = await _owner(conn)
        if owner:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
        elif await conn.fetchval("SELECT to_regclass('schema_migrations')") is None:
            raise MigrationsPending("no schema yet: run `agentloom migrate` as the owner")
        done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        pending = [m for m in available() if m.version not in done]
        if pending and not owner:
            names = ", ".join(f"{m.version:03d}_{m.name}" for m in pending)
            raise MigrationsPending(f"migrations pending ({names}): run `agentloom migrate`")
        applied = []
        for m in pending:
            async with conn.transaction():
                await conn.execute(m.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    m.version,
                    m.name,
                )
            log.info("applied migration %03d_%s", m.version, m.name)
            applied.append(m.version)
        if owner and (applied or await roles.drifted(conn)):
            log.info("granted the logins of %s", ", ".join(await roles.grant_roles(conn)))
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)


async def apply_dsn(dsn: str) -> list[int]:
    conn = await asyncpg.connect(dsn)
    try:
        return await apply(conn)
    finally:
        await conn.close()


def main() -> None:
    from schemas.settings import Settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    versions = asyncio.run(apply_dsn(roles.configured_dsn(Settings())))
    print(f"migrations applied: {versions or 'none pending'}")


if __name__ == "__main__":
    main()
