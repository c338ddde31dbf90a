"""The processor's per-batch statements are planned once per connection, not at every
batch (issue 37): a statement whose custom plan PostgreSQL keeps choosing is planned
again at every execution, and planning cost several times what running it did. Checked
on the real statement and server through ``pg_prepared_statements``, whose counts say
which plan each execution ran."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import asyncpg
import pytest

from storage.records.session_states import _load_known
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration
BATCHES = 9


async def _plans(conn: asyncpg.Connection, marker: str) -> tuple[int, int]:
    row = await conn.fetchrow(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
        " WHERE strpos(statement, $1) > 0",
        marker,
    )
    assert row is not None, "the statement was not prepared on this connection"
    return int(row["generic_plans"]), int(row["custom_plans"])


@pytest.mark.spec("R3.1")
async def test_a_batchs_committed_keys_are_read_with_one_plan_per_connection(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        run = await c.start_run(await new_session(c))
        for k in range(3):
            await c.append_user(run, f"question {k}", f"plans-{k}")
        await c.prepare(run)  # waits for the appends to be committed
    sid = run.session_id
    async with db.acquire() as conn:
        found: list[set[str]] = []
        for n in range(1, BATCHES + 1):  # batches of 1..9 keys, some committed
            state = SimpleNamespace(known_keys=set(), known_operations=set())
            keys = {sid: {f"plans-{k}" for k in range(n)}}
            existing = await _load_known(conn, cast(Any, {sid: state}), [sid], keys, {})
            found.append({key for _, key in existing})
            assert state.known_keys == found[-1]
        generic, custom = await _plans(
            conn, "jsonb_to_recordset($1::jsonb) AS k(sid text, ek text)"
        )
    assert found[-1] == {"plans-0", "plans-1", "plans-2"}  # what was committed, only
    # PostgreSQL plans the first five executions for their values, then keeps the generic
    # plan when it costs no more: with the keys' count unknown to both, it does.
    assert custom <= 5 and generic == BATCHES - custom
