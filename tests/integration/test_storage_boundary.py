"""Storage's error boundary on a real PostgreSQL: a pooled connection (storage.pool)
raises our errors, the driver's as their cause — for a statement, and for a COMMIT that
fails — so every consumer decides from our types (streams/faults.py, R15.3)."""

from __future__ import annotations

import asyncpg
import pytest

from schemas.errors import StorageConflict, StorageRejected
from schemas.settings import PlanCacheMode, Settings
from services.prepare.bootstrap import running_service
from storage.plans import custom_plan
from storage.pool import create_pool
from storage.records.threads import uncovered_records
from streams.faults import describe_failure, is_transient
from streams.kafka.provision import provision
from streams.wiring import open_pool
from tests.support.services import services_env, settings_of
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


@pytest.mark.spec("R15.3")
async def test_a_refused_statement_and_a_deadlock_arrive_as_ours(stack: Stack) -> None:
    pool = await create_pool(stack.pg_dsn, 1, 1)
    try:
        with pytest.raises(StorageRejected) as refused:
            await pool.fetchval("SELECT 1 / 0")
        assert refused.value.sqlstate == "22012"
        assert isinstance(refused.value.__cause__, asyncpg.DivisionByZeroError)
        assert describe_failure(refused.value)[0] == "storage_rejected"
        assert not is_transient(refused.value)

        deadlock = "DO $$ BEGIN RAISE EXCEPTION 'deadlock' USING ERRCODE = '40P01'; END $$"
        async with pool.acquire() as conn:
            with pytest.raises(StorageConflict) as conflict:
                await conn.execute(deadlock)
        assert isinstance(conflict.value.__cause__, asyncpg.DeadlockDetectedError)
        assert is_transient(conflict.value)
    finally:
        await pool.close()


@pytest.mark.spec("R15.3")
async def test_a_commit_postgresql_refuses_arrives_as_ours(stack: Stack) -> None:
    pool = await create_pool(stack.pg_dsn, 1, 1)
    try:
        async with pool.acquire() as conn:
            await conn.execute(
                "CREATE TEMP TABLE boundary (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)"
            )
            with pytest.raises(StorageRejected) as refused:
                async with conn.transaction():
                    await conn.execute("INSERT INTO boundary VALUES (1), (1)")
            # The deferred constraint is checked at COMMIT, which Transaction sends
            # through the connection's execute.
            assert isinstance(refused.value.__cause__, asyncpg.UniqueViolationError)
            assert await conn.fetchval("SELECT count(*) FROM boundary") == 0
    finally:
        await pool.close()


async def _plans(pool: asyncpg.Pool) -> tuple[str, int, int]:
    """The connection's plan_cache_mode, then the generic and custom plans a short
    statement ran on, called 8 times with new arguments."""
    sql = (
        "SELECT count(*) FROM pg_class WHERE relpages BETWEEN $1 AND $2"
        " AND relname = ANY($3::name[])"
    )
    async with pool.acquire() as conn:
        mode = await conn.fetchval("SHOW plan_cache_mode")
        for n in range(8):
            await conn.fetchval(sql, n, n + 10, ["pg_class", f"t{n}"])
        row = await conn.fetchrow(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
            sql,
        )
    assert row is not None
    return mode, row["generic_plans"], row["custom_plans"]


@pytest.mark.parametrize(
    ("configured", "mode", "generic", "custom"),
    [
        ({}, "force_generic_plan", 8, 0),  # the default
        ({"pg_plan_cache_mode": "force_custom_plan"}, "force_custom_plan", 0, 8),
    ],
)
async def test_the_processors_pool_plans_as_settings_pg_plan_cache_mode_says(
    stack: Stack, configured: dict[str, PlanCacheMode], mode: str, generic: int, custom: int
) -> None:
    """``Settings.pg_plan_cache_mode`` through the processor's own wiring
    (``streams.wiring.open_pool``): by default a repeated statement runs one generic
    plan; set otherwise, a plan made for each call's arguments."""
    settings = Settings(pg_dsn=stack.pg_dsn, pg_role_logins=False, **configured)
    pool = await open_pool(settings)
    try:
        assert await _plans(pool) == (mode, generic, custom)
    finally:
        await pool.close()


@pytest.mark.parametrize(
    ("configured", "mode", "generic", "custom"),
    [
        ({}, "force_generic_plan", 8, 0),  # the default
        ({"ALC_PG_PLAN_CACHE_MODE": "force_custom_plan"}, "force_custom_plan", 0, 8),
    ],
)
async def test_prepares_pool_plans_as_settings_pg_plan_cache_mode_says(
    stack: Stack, pg_dsn: str, configured: dict[str, str], mode: str, generic: int, custom: int
) -> None:
    """``Settings.pg_plan_cache_mode`` through Prepare's own start-up
    (``services.prepare.bootstrap.running_service``, its own login), as the environment
    sets it: the pool every prepare reads through plans as the setting says."""
    settings = settings_of(services_env(stack, pg_dsn) | configured)
    await provision(settings)
    async with running_service(settings) as svc:
        assert svc.pool is not None
        assert await _plans(svc.pool) == (mode, generic, custom)


async def test_a_pooled_statement_is_planned_once_not_on_every_call(stack: Stack) -> None:
    """``create_pool``'s ``plan_cache_mode`` (the services pass
    ``Settings.pg_plan_cache_mode``) is each pooled connection's: a statement repeated
    with new arguments runs one generic plan, or a plan made for each call's arguments
    (issue 37, docs/scaling.md)."""
    modes: tuple[tuple[PlanCacheMode, int, int], ...] = (
        ("force_generic_plan", 8, 0),
        ("force_custom_plan", 0, 8),
    )
    for mode, generic, custom in modes:
        pool = await create_pool(stack.pg_dsn, 1, 1, plan_cache_mode=mode)
        try:
            assert await _plans(pool) == (mode, generic, custom)
        finally:
            await pool.close()


async def test_a_custom_planned_read_inside_a_transaction_leaves_the_rest_of_it_generic(
    pg_dsn: str,
) -> None:
    """``storage.plans.custom_plan`` inside a caller's transaction (the processor's batch
    reads a view's uncovered records in it): the read is planned for its arguments, and
    the caller's later statements plan as the pool says again. ``SET LOCAL`` outlives a
    released savepoint; left set, it re-planned each of the batch's later statements
    (issue 37, docs/scaling.md)."""
    pool = await create_pool(pg_dsn, 1, 1, plan_cache_mode="force_generic_plan")
    try:
        async with pool.acquire() as conn, conn.transaction():
            async with custom_plan(conn):
                assert await conn.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
            assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
            assert await uncovered_records(conn, "no-such-session", 10, frozenset({"r"})) == []
            assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
        assert await _plans(pool) == ("force_generic_plan", 8, 0)
        async with pool.acquire() as conn:  # on its own, its transaction is its scope
            async with custom_plan(conn):
                assert await conn.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
            assert not conn.is_in_transaction()
    finally:
        await pool.close()
