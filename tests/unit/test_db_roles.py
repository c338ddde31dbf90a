"""Least-privilege database logins (issue 38 item 3, storage/roles.py): the plan covers
every table the migrations create, keeps keys from analytics and compaction and key
digests from the processor, and grants each process what the SQL of the modules it
imports reads and writes — derived from the code, so a new query cannot drift from
the grants unnoticed."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from storage.roles import PLAN, role_dsn

pytestmark = pytest.mark.spec("R15.4")

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "domain", "storage", "streams", "services")
# Each role's process, by the module its entry point runs.
ENTRY = {
    "processor": "streams.__main__",
    "compaction": "services.compaction.__main__",
    "prepare": "services.prepare.__main__",
    "analytics": "services.analytics.__main__",
    "console": "services.console.__main__",
    "cli": "services.cli.__main__",
}
# (role, module): imported for a part of it only, so the rest of its SQL is not the
# role's; each names the part (granted by hand in storage/roles.py).
PARTLY_USED = {
    ("processor", "storage.api_keys"): "PgBusKeys, a key's id, space and kind",
    ("prepare", "storage.api_keys"): "find_key, an HTTP call's key",
    ("prepare", "storage.records.outcomes"): "reads an append's outcome",
    ("prepare", "storage.analytics"): "reads the rollups (the analytics route)",
    ("compaction", "storage.compaction.summaries"): "current_summary, revocation_epoch",
    ("console", "storage.api_keys"): "find_key, a sign-in's key",
    ("cli", "storage.records.outcomes"): "NOT_BINDING, a constant",
}
# Tables a role reads through a part of a module (PARTLY_USED); and every role reads
# schema_migrations, to check that nothing is pending.
BY_HAND = {
    "processor": {"api_keys"},
    "prepare": {"api_keys", "analytics_rollups"},
    "console": {"api_keys"},
}
OWNER_ONLY = {"storage.migrate"}  # DDL and the migrations' table: the owner's
_TABLE = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+([a-z_][a-z0-9_]*)", re.I)
_WRITE = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE)\s+([a-z_][a-z0-9_]*)", re.I)
_LOCKED = re.compile(r"FOR UPDATE OF ([a-z_]+)|FROM ([a-z_][a-z0-9_]*)[^()]*FOR UPDATE", re.I)


def schema_tables() -> set[str]:
    text = "\n".join(p.read_text() for p in (ROOT / "storage" / "migrations").glob("*.sql"))
    found = re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?([a-z_]+)", text, re.I)
    return {t.lower() for t in found} | {"schema_migrations"}


def _path(module: str) -> Path | None:
    p = ROOT / Path(*module.split("."))
    for candidate in (p / "__init__.py", p.with_suffix(".py")):
        if candidate.exists():
            return candidate
    return None


def _imports(path: Path, module: str) -> set[str]:
    out = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            base = module.split(".")[: -n.level or None] if n.level else []
            if n.level and path.name == "__init__.py":
                base = module.split(".")[: len(module.split(".")) - n.level + 1]
            m = ".".join([*base, n.module] if n.module else base)
            out |= {m} | {f"{m}.{a.name}" for a in n.names}
    return {m for m in out if m.split(".")[0] in PACKAGES}


def closure(entry: str) -> dict[str, Path]:
    """Every module of ours ``entry`` imports, transitively."""
    seen: dict[str, Path] = {}
    todo = [entry]
    while todo:
        m = todo.pop()
        if m in seen or (p := _path(m)) is None:
            continue
        seen[m] = p
        parts = m.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += _imports(p, m)
    return seen


def sql_access(path: Path, tables: set[str]) -> tuple[set[str], set[str]]:
    """(tables read, tables written or row-locked) by the SQL literals of a module."""
    reads, writes = set(), set()
    for n in ast.walk(ast.parse(path.read_text())):
        copy = isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "copy_records_to_table"
        if copy and n.args and isinstance(n.args[0], ast.Constant):  # type: ignore[attr-defined]
            writes |= {str(n.args[0].value)} & tables  # type: ignore[attr-defined]
        if isinstance(n, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "x" for v in n.values)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            text = n.value
        else:
            continue
        if not re.search(r"\b(SELECT|INSERT|UPDATE|DELETE|WITH)\b", text):
            continue
        reads |= {t.lower() for t in _TABLE.findall(text)} & tables
        writes |= {t.lower() for t in _WRITE.findall(text)} & tables
        aliases = dict(re.findall(r"\b([a-z_]+)\s+([a-z])\b(?=[^(]*FOR UPDATE OF \2)", text))
        for of, table in _LOCKED.findall(text):
            locked = {a: t for t, a in aliases.items()}.get(of, of) or table
            writes |= {locked} & tables
    return reads, writes


def needed(role: str, tables: set[str]) -> tuple[set[str], set[str]]:
    """What the modules of ``role``'s process read and write (owner-only ones, and the
    modules it uses a part of, aside)."""
    reads, writes = set(), set()
    for module, path in closure(ENTRY[role]).items():
        if module in OWNER_ONLY or (role, module) in PARTLY_USED:
            continue
        if module.startswith(("storage", "streams", "services")):
            r, w = sql_access(path, tables)
            reads |= r | w
            writes |= w
    return reads, writes


def test_every_table_is_granted_to_a_role_and_every_granted_table_exists() -> None:
    tables = schema_tables()
    planned = set().union(*(g.tables() for g in PLAN.values()))
    assert tables - planned == set(), "a table no process may use: add it to storage/roles.py"
    assert planned - tables == set()


def test_keys_stay_with_who_checks_them() -> None:
    assert "api_keys" not in PLAN["analytics"].tables()
    assert "api_keys" not in PLAN["compaction"].tables()
    processor = PLAN["processor"]
    assert "api_keys" not in processor.reads | processor.writes
    assert "key_sha256" not in processor.columns["api_keys"]
    writers = {role for role, g in PLAN.items() if "api_keys" in g.writes}
    assert writers == {"cli"}  # agentloom-keys; no service creates keys


@pytest.mark.parametrize("role", sorted(ENTRY))
def test_each_role_is_granted_what_its_code_reads_and_writes(role: str) -> None:
    tables = schema_tables()
    reads, writes = needed(role, tables)
    g = PLAN[role]
    assert writes - g.writes == set(), f"{role} writes them: grant them in storage/roles.py"
    assert reads - g.tables() == set(), f"{role} reads them: grant them in storage/roles.py"
    assert reads, f"no SQL found for {role}: the scan is broken"


@pytest.mark.parametrize("role", sorted(ENTRY))
def test_no_role_is_granted_more_than_its_code_needs(role: str) -> None:
    reads, writes = needed(role, schema_tables())
    g = PLAN[role]
    assert g.writes - writes == set()
    extra = g.tables() - reads - writes - {"schema_migrations"}
    assert extra == BY_HAND.get(role, set())


def test_the_scan_sees_reads_writes_and_row_locks() -> None:
    processor_reads, processor_writes = needed("processor", schema_tables())
    assert {"records", "sessions", "consumer_offsets"} <= processor_writes
    assert "releases" in processor_reads and "releases" not in processor_writes
    analytics_reads, analytics_writes = needed("analytics", schema_tables())
    assert analytics_writes == {"analytics_offsets", "analytics_rollups"}
    assert "api_keys" not in analytics_reads


def test_a_role_dsn_names_the_login_and_keeps_the_server() -> None:
    dsn = role_dsn("postgresql://agentloom:pw@db.example:5432/app?sslmode=require", "cli")
    assert dsn == "postgresql://alc_cli@db.example:5432/app?sslmode=require"


# --- deploy/k8s ---------------------------------------------------------------------------

DEPLOYMENTS = {
    "agentloom-processor": "processor",
    "agentloom-prepare": "prepare",
    "agentloom-compaction": "compaction",
    "agentloom-analytics": "analytics",
}


@pytest.mark.parametrize("deployment", sorted(DEPLOYMENTS))
def test_each_deployment_logs_in_to_the_database_as_its_own_role(deployment: str) -> None:
    from tests.unit.k8s_checks import manifests, named

    docs = manifests()
    role = DEPLOYMENTS[deployment]
    pod = named(docs, "Deployment")[deployment]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert urlsplit(env["ALC_PG_DSN"]["value"]).username == f"alc_{role}"
    ref = env["ALC_PG_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"]) == (f"agentloom-pg-{role}", "password")
    assert "agentloom-pg-app" not in repr(pod)  # the owner's login: the migration Job's
    managed = {
        r["name"]: r["passwordSecret"]["name"]
        for r in named(docs, "Cluster")["agentloom-pg"]["spec"]["managed"]["roles"]
    }
    assert managed[f"alc_{role}"] == f"agentloom-pg-{role}"


def test_only_the_migration_job_holds_the_owners_login() -> None:
    from tests.unit.k8s_checks import K8S, manifests, named

    docs = manifests()
    job = named(docs, "Job")["agentloom-migrate"]["spec"]["template"]["spec"]["containers"][0]
    assert job["command"] == ["python", "-m", "storage.migrate"]
    (dsn,) = job["env"]
    assert dsn["valueFrom"]["secretKeyRef"] == {"name": "agentloom-pg-app", "key": "uri"}
    script = (K8S / "db-logins.sh").read_text("utf-8")
    assert "--from-literal" not in script
    roles = {r["name"] for r in named(docs, "Cluster")["agentloom-pg"]["spec"]["managed"]["roles"]}
    assert roles <= {f"alc_{r}" for r in PLAN}


def test_a_password_given_apart_joins_the_configured_dsn_and_role_logins_win() -> None:
    from schemas.settings import Settings
    from storage.roles import configured_dsn, dsn_of

    s = Settings(  # a deployment: each process's login named in its DSN (not from the env)
        pg_dsn="postgresql://alc_prepare@agentloom-pg-rw:5432/agentloom",
        pg_password="p@ss/w:rd",  # type: ignore[arg-type]
        pg_role_logins=False,
    )
    assert (
        configured_dsn(s)
        == "postgresql://alc_prepare:p%40ss%2Fw%3Ard@agentloom-pg-rw:5432/agentloom"
    )
    assert dsn_of(s, "prepare") == configured_dsn(s)
    local = Settings(pg_dsn="postgresql://agentloom@127.0.0.1:55432/x", pg_role_logins=True)
    assert dsn_of(local, "analytics") == "postgresql://alc_analytics@127.0.0.1:55432/x"
    assert configured_dsn(local) == local.pg_dsn  # migrations: the owner
