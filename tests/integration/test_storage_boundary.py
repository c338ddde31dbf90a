"""Storage's error boundary on a real PostgreSQL: a pooled connection (storage.pool)
raises our errors, the driver's as their cause — for a statement, and for a COMMIT that
fails — so every consumer decides from our types (streams/faults.py, R15.3)."""

from __future__ import annotations

import asyncpg
import pytest

from schemas.errors import StorageConflict, StorageRejected
from storage.pool import create_pool
from streams.faults import describe_failure, is_transient
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


async def test_a_pooled_statement_is_planned_once_not_on_every_call(stack: Stack) -> None:
    """``create_pool``'s ``plan_cache_mode`` (the services pass
    ``Settings.pg_plan_cache_mode``) is each pooled connection's: a statement repeated
    with new arguments runs one generic plan, or a plan made for each call's arguments
    (issue 37, docs/scaling.md)."""
    sql = (
        "SELECT count(*) FROM pg_class WHERE relpages BETWEEN $1 AND $2"
        " AND relname = ANY($3::name[])"
    )
    for mode, generic in (("force_generic_plan", True), ("force_custom_plan", False)):
        pool = await create_pool(stack.pg_dsn, 1, 1, plan_cache_mode=mode)
        try:
            async with pool.acquire() as conn:
                assert await conn.fetchval("SHOW plan_cache_mode") == mode
                for n in range(8):
                    await conn.fetchval(sql, n, n + 10, ["pg_class", f"t{n}"])
                plans = await conn.fetchrow(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                    " WHERE statement = $1",
                    sql,
                )
        finally:
            await pool.close()
        assert plans is not None
        if generic:
            assert plans["custom_plans"] == 0 and plans["generic_plans"] == 8
        else:
            assert plans["generic_plans"] == 0 and plans["custom_plans"] == 8
