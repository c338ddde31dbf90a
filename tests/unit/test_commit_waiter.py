"""Prepare's read-your-writes waiter (``CommitWaiter``, issue 37): the committed offsets
are read once per processor commit for all waiters, never once per waiter, and a
prepare whose appends are known committed reads nothing."""

from __future__ import annotations

import asyncio

import pytest

from schemas.errors import NotCommittedYet
from services.prepare.assembly.waiter import CommitWaiter


class Offsets:
    """``consumer_offsets`` as the processor leaves it, and how often it was read."""

    def __init__(self) -> None:
        self.committed: dict[int, int] = {}
        self.reads = 0

    async def read(self) -> dict[int, int]:
        self.reads += 1
        await asyncio.sleep(0.01)  # a round trip: concurrent waiters overlap it
        return dict(self.committed)


def waiter(db: Offsets) -> CommitWaiter:
    return CommitWaiter(None, "proc", "ctx.records", read=db.read)  # type: ignore[arg-type]


async def test_many_waiters_share_one_read_per_commit() -> None:
    db = Offsets()
    w = waiter(db)
    waits = [asyncio.create_task(w.wait({p % 4: 10 + p}, 5.0)) for p in range(48)]
    await asyncio.sleep(0.05)
    assert db.reads == 1  # the 48 waiters' first look: one read
    db.committed = {0: 100, 1: 100, 2: 100, 3: 100}
    w._on_notify()  # the processor's NOTIFY after its commit
    await asyncio.wait_for(asyncio.gather(*waits), 1.0)
    assert db.reads == 2


async def test_known_offsets_need_no_read() -> None:
    db = Offsets()
    db.committed = {1: 8}
    w = waiter(db)
    await w.wait({1: 7}, 1.0)
    await w.wait({1: 3}, 1.0)
    await w.wait({}, 1.0)
    assert db.reads == 1


async def test_a_missed_notification_is_caught_by_the_poll() -> None:
    db = Offsets()
    w = waiter(db)
    waiting = asyncio.create_task(w.wait({0: 5}, 3.0))
    await asyncio.sleep(0.05)
    db.committed = {0: 6}  # committed, but no NOTIFY reached Prepare
    await asyncio.wait_for(waiting, 1.0)  # within the 0.25 s poll
    assert db.reads >= 2


async def test_not_committed_in_time_raises() -> None:
    db = Offsets()
    db.committed = {0: 5}
    with pytest.raises(NotCommittedYet):
        await waiter(db).wait({0: 5}, 0.0)  # next offset 5: offset 5 is not in yet


async def test_a_failed_read_is_retried_by_the_next_waiter() -> None:
    db = Offsets()
    calls = 0

    async def flaky() -> dict[int, int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("database restarting")
        return {0: 9}

    w = CommitWaiter(None, "proc", "ctx.records", read=flaky)  # type: ignore[arg-type]
    with pytest.raises(ConnectionError):
        await w.wait({0: 1}, 1.0)
    await w.wait({0: 1}, 1.0)
    assert calls == 2 and db.reads == 0
