"""One PostgreSQL login per service, each granted only the tables it reads and writes
(docs/security.md "Database roles"); the migration tool creates and grants them.

The database owner — the login migrations run as (``agentloom migrate``) — is the only
one with DDL. Every other process connects as its role's login (``Settings.pg_dsn_of``):

- processor: writes the session state it commits; reads releases, blobs, and of
  ``api_keys`` only a key's id, space, kind and revocation (never its digest);
- compaction: writes its operations; reads the session state a job summarizes;
- prepare: writes sessions, grants, releases, blobs, model calls, prepared contexts,
  render states, call views and calibration; reads the state a prepare assembles, the
  keys it checks, the rollups;
- analytics: writes its rollups and offsets; reads sessions and releases (labels);
- console: writes its sign-in sessions and call views; reads what the inspector shows
  and the keys it signs in with;
- cli: writes API keys, dlq replays and call views; reads what the inspector and the
  dlq commands show.

Analytics and compaction read no key; the processor reads no key digest. Which tables
each role's code touches is checked against this plan by ``tests/unit/test_db_roles.py``
(derived from the SQL of the modules each process imports); a forbidden table is refused
on the real database by ``tests/integration/test_db_roles.py``.

``grant_roles`` is idempotent and exact: each role's table privileges are revoked, then
granted as planned, whenever a migration ran or the privileges drifted. A missing role is
created (``LOGIN``, no password: the local stack trusts 127.0.0.1) where the owner may
create roles; elsewhere the operator creates it (CloudNativePG's managed roles,
``deploy/k8s/postgres.yaml``) and only the grants are ours.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg

from schemas.settings import Settings

log = logging.getLogger(__name__)

ROLE_PREFIX = "alc_"
WRITE = "SELECT, INSERT, UPDATE, DELETE"


@dataclass(frozen=True)
class Grants:
    """What one role may do: tables it writes (and reads), tables it only reads, and
    columns of a table it reads in part."""

    writes: frozenset[str]
    reads: frozenset[str]
    columns: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def tables(self) -> frozenset[str]:
        return self.writes | self.reads | frozenset(self.columns)


def _g(writes: str, reads: str, **columns: tuple[str, ...]) -> Grants:
    return Grants(frozenset(writes.split()), frozenset(reads.split()), columns)


PLAN: dict[str, Grants] = {
    "processor": _g(
        "compaction_jobs compaction_state consumer_offsets event_outcomes history_snapshots"
        " records revoked_resources runs sessions summary_revisions threads trigger_reports",
        "blobs releases schema_migrations",
        api_keys=("key_id", "space_id", "kind", "revoked_at"),
    ),
    "compaction": _g(
        "compaction_operations",
        "blobs compaction_jobs history_snapshots prepared_contexts records"
        " releases revoked_resources runs schema_migrations sessions summary_revisions",
    ),
    "prepare": _g(
        "blobs call_views model_calibration model_calls prepared_contexts releases"
        " render_states session_grant_revocations session_grants sessions",
        "analytics_rollups api_keys compaction_jobs compaction_state consumer_offsets"
        " event_outcomes history_snapshots records revoked_resources runs schema_migrations"
        " summary_revisions trigger_reports",
    ),
    "analytics": _g("analytics_offsets analytics_rollups", "releases schema_migrations sessions"),
    "console": _g(
        "call_views console_sessions",
        "api_keys blobs compaction_jobs compaction_state history_snapshots model_calls"
        " prepared_contexts records releases revoked_resources runs schema_migrations"
        " session_grants sessions summary_revisions",
    ),
    "cli": _g(
        "api_keys call_views dlq_replays",
        "blobs compaction_jobs compaction_state consumer_offsets event_outcomes"
        " history_snapshots model_calls prepared_contexts records releases revoked_resources"
        " runs schema_migrations session_grants sessions summary_revisions",
    ),
}


def login(role: str) -> str:
    """The PostgreSQL login of ``role`` (``alc_processor``, ...)."""
    return f"{ROLE_PREFIX}{role}"


def role_dsn(dsn: str, role: str) -> str:
    """``dsn`` with ``role``'s login as its user (and no password: the local stack's
    trust authentication; a deployment gives each process its own DSN instead)."""
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{login(role)}@{host}"))


def configured_dsn(settings: Settings) -> str:
    """``ALC_PG_DSN`` with ``ALC_PG_PASSWORD`` as its password when that is set: the
    owner's locally, the process's own login in a deployment (deploy/k8s)."""
    if settings.pg_password is None:
        return settings.pg_dsn
    parts = urlsplit(settings.pg_dsn)
    user, _, host = parts.netloc.rpartition("@")
    secret = quote(settings.pg_password.get_secret_value(), safe="")
    return urlunsplit(parts._replace(netloc=f"{user.partition(':')[0]}:{secret}@{host}"))


def dsn_of(settings: Settings, role: str) -> str:
    """The DSN a process of ``role`` queries with: its own login when
    ``ALC_PG_ROLE_LOGINS`` is set (the local stack), else the configured one (a
    deployment names each process's login there)."""
    if settings.pg_role_logins:
        return role_dsn(settings.pg_dsn, role)
    return configured_dsn(settings)


async def _ensure_login(conn: asyncpg.Connection, name: str) -> bool:
    """Whether the login exists (created here when the owner may create roles)."""
    if await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname=$1", name):
        return True
    may = await conn.fetchval(
        "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname=current_user"
    )
    if not may:
        log.warning("no database role %s, and no right to create it: not granted", name)
        return False
    # another runner (another database of the same server) may have made it meanwhile
    with contextlib.suppress(asyncpg.DuplicateObjectError, asyncpg.UniqueViolationError):
        await conn.execute(f'CREATE ROLE "{name}" LOGIN')
    return True


async def grant_roles(conn: asyncpg.Connection) -> list[str]:
    """Create the missing logins (where allowed) and make each role's table privileges
    exactly ``PLAN``'s; returns the roles granted. Run by the owner, in a transaction."""
    tables = {
        r["tablename"]
        for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname='public'")
    }
    granted = []
    for role, g in PLAN.items():
        name = login(role)
        if not await _ensure_login(conn, name):
            continue
        async with conn.transaction():
            await conn.execute(f'REVOKE ALL ON ALL TABLES IN SCHEMA public FROM "{name}"')
            await conn.execute(f'REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM "{name}"')
            for t in sorted(g.writes & tables):
                await conn.execute(f'GRANT {WRITE} ON "{t}" TO "{name}"')
            for t in sorted(g.reads & tables):
                await conn.execute(f'GRANT SELECT ON "{t}" TO "{name}"')
            for t, cols in sorted(g.columns.items()):
                if t in tables:
                    listed = ", ".join(f'"{c}"' for c in cols)
                    await conn.execute(f'GRANT SELECT ({listed}) ON "{t}" TO "{name}"')
            if g.writes:  # bigserial ids of the tables it inserts into
                await conn.execute(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO "{name}"')
        granted.append(role)
    return granted


def expected(tables: set[str]) -> set[tuple[str, str, str, str]]:
    """``(login, table, column or "", privilege)`` as ``PLAN`` grants them on ``tables``."""
    out = set()
    for role, g in PLAN.items():
        name = login(role)
        for t in g.writes & tables:
            out |= {(name, t, "", p) for p in WRITE.split(", ")}
        for t in g.reads & tables:
            out.add((name, t, "", "SELECT"))
        for t, cols in g.columns.items():
            if t in tables:
                out |= {(name, t, c, "SELECT") for c in cols}
    return out


async def granted(conn: asyncpg.Connection) -> set[tuple[str, str, str, str]]:
    """The table and column privileges our logins hold, from the catalog's ACLs."""
    rows = await conn.fetch(
        "SELECT r.rolname AS login, c.relname AS t, '' AS col, a.privilege_type AS p"
        " FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a"
        " JOIN pg_roles r ON r.oid = a.grantee"
        " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'"
        " AND r.rolname LIKE $1"
        " UNION ALL"
        " SELECT r.rolname, c.relname, t.attname, a.privilege_type"
        " FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid"
        " CROSS JOIN LATERAL aclexplode(t.attacl) a JOIN pg_roles r ON r.oid = a.grantee"
        " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'"
        " AND r.rolname LIKE $1",
        ROLE_PREFIX.replace("_", "\\_") + "%",
    )
    return {(r["login"], r["t"], r["col"], r["p"]) for r in rows}


async def drifted(conn: asyncpg.Connection) -> bool:
    """Whether the logins' privileges differ from ``PLAN`` (or a login is missing)."""
    tables = {
        r["tablename"]
        for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname='public'")
    }
    logins = {r["rolname"] for r in await conn.fetch("SELECT rolname FROM pg_roles")}
    if any(login(role) not in logins for role in PLAN):
        return True
    return await granted(conn) != expected(tables)
