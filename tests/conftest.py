"""Shared fixtures: the real stack (see tests/support/stack.py), a fresh database and our
services per test session, and the ``spec`` marker recorded in the JUnit XML."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from hypothesis import settings

from schemas.settings import Settings
from tests.support.services import Services, start_services
from tests.support.stack import Stack, resolve_stack

logging.getLogger("tests.stack").setLevel(logging.INFO)
# The dev stack's partition count (as the Makefile sets it), also for pytest run directly;
# the library default (24) is sized for production.
os.environ.setdefault("ALC_TOPIC_PARTITIONS", "4")
# CI tries the same examples on every run, so a red CI is reproducible and is about the
# change it ran on; local runs keep drawing new examples (and keep the failing ones in
# .hypothesis/), which is where the property tests find edges. Neither has a deadline
# per example: the tests run on two workers beside the type checker, and an example's
# time there is the machine's load, not the code's.
settings.register_profile("ci", derandomize=True, print_blob=True, deadline=None)
settings.register_profile("local", deadline=None)
settings.load_profile("ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "local")


@pytest.fixture(autouse=True)
def _record_spec(request: pytest.FixtureRequest, record_property) -> None:  # type: ignore[no-untyped-def]
    ids: list[str] = []
    for m in request.node.iter_markers("spec"):
        ids.extend(str(a) for a in m.args)
    if ids:
        record_property("spec", ",".join(sorted(set(ids))))


# Where each test session's stack came from: a pytest-xdist worker's output is not
# shown, so each writes it here and the run prints it at its end.
STACK_LOG = Path(__file__).resolve().parents[1] / "build" / "test-results" / "stack.log"


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller, or a run on its own
        STACK_LOG.unlink(missing_ok=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if STACK_LOG.exists():
        for line in sorted(set(STACK_LOG.read_text().splitlines())):
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    with resolve_stack() as st:
        chosen = f"[tests] stack from {st.source}: kafka={st.kafka_bootstrap} pg={st.pg_dsn}"
        print(f"\n{chosen}")
        STACK_LOG.parent.mkdir(parents=True, exist_ok=True)
        with STACK_LOG.open("a") as f:
            f.write(chosen + "\n")
        # Raw clients and Settings() in this process authenticate as the stack expects.
        os.environ.update(dict(st.auth_env))
        yield st


@pytest.fixture(scope="session")
def pg_dsn(stack: Stack) -> Iterator[str]:
    """A fresh database per test session, dropped afterwards."""
    name = f"alc_test_{uuid.uuid4().hex[:10]}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(stack.pg_dsn)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    base, _, _ = stack.pg_dsn.rpartition("/")
    yield f"{base}/{name}"
    asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def services(stack: Stack, pg_dsn: str) -> Iterator[Services]:
    svc = start_services(stack, pg_dsn)
    yield svc
    svc.stop()


@pytest.fixture(scope="session")
def settings(services: Services) -> Settings:
    return Settings(**{k[4:].lower(): v for k, v in services.settings_env.items()})


@pytest.fixture
async def db(pg_dsn: str, services: Services) -> AsyncIterator[asyncpg.Pool]:
    from storage.pool import create_pool

    pool = await create_pool(pg_dsn, 1, 4)
    yield pool
    await pool.close()
