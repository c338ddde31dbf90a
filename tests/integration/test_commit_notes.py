"""Prepare's read-your-writes waiter learns a commit's offsets from its notification
(issue 37): the processor's ``write_offsets`` sends them with the commit, through
PostgreSQL's NOTIFY, so a prepare waiting for its appends reads ``consumer_offsets`` once
at the start and never again while notifications arrive."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from services.prepare.assembly.waiter import CommitWaiter
from storage.records.batch_sql import write_offsets
from storage.records.offsets import committed_offsets

pytestmark = pytest.mark.integration


async def test_a_waiter_hears_the_commits_offsets_without_reading_them(
    pg_dsn: str, db: asyncpg.Pool
) -> None:
    consumer, topic = f"notes-{uuid.uuid4().hex[:8]}", "ctx.records"
    reads = 0

    async def read() -> dict[int, int]:
        nonlocal reads
        reads += 1
        return await committed_offsets(db, consumer, topic)

    async def commit(offsets: dict[int, int]) -> None:
        async with db.acquire() as conn, conn.transaction():
            await write_offsets(conn, consumer, topic, offsets)

    await commit({0: 10, 1: 4})
    waiter = CommitWaiter(db, consumer, topic, read=read)
    await waiter.start(pg_dsn)
    try:
        await waiter.wait({0: 9}, 5.0)  # committed before the waiter began: one read
        assert reads == 1
        waiting = asyncio.create_task(waiter.wait({1: 20, 2: 3}, 5.0))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await commit({1: 21})
        await asyncio.sleep(0.05)
        assert not waiting.done()  # partition 2 is not committed yet
        await commit({2: 4})
        await asyncio.wait_for(waiting, 2.0)
        assert reads == 1
    finally:
        await waiter.close()
