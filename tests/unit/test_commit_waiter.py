"""Prepare's read-your-writes waiter (``CommitWaiter``, issue 37): the committed offsets
are read once per processor commit for all waiters, never once per waiter, and a
prepare whose appends are known committed reads nothing."""

from __future__ import annotations

import asyncio

import pytest

from schemas.errors import NotCommittedYet
from services.prepare.assembly.waiter import CommitWaiter
from storage.records.offsets import commit_note, read_commit_note


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
    w._on_notify(None, 0, "ctx_committed", "ctx.records")  # an older processor's NOTIFY
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


def notify(w: CommitWaiter, payload: str) -> None:
    w._on_notify(None, 0, "ctx_committed", payload)


async def test_a_commit_note_wakes_the_waiters_with_no_read() -> None:
    db = Offsets()
    w = waiter(db)
    waits = [asyncio.create_task(w.wait({p % 4: 10 + p}, 5.0)) for p in range(48)]
    await asyncio.sleep(0.05)
    assert db.reads == 1  # the first look: what was committed before this process began
    # Each commit's note says what it wrote; the table is not read again.
    notify(w, commit_note("proc", "ctx.records", {0: 100, 1: 100}))
    notify(w, commit_note("proc", "ctx.records", {2: 100, 3: 100}))
    await asyncio.wait_for(asyncio.gather(*waits), 1.0)
    assert db.reads == 1
    await w.wait({3: 99}, 1.0)
    assert db.reads == 1


async def test_a_note_before_the_first_read_is_not_taken_for_all_that_is_committed() -> None:
    db = Offsets()
    db.committed = {0: 50, 1: 7}
    w = waiter(db)
    notify(w, commit_note("proc", "ctx.records", {1: 8}))
    await w.wait({0: 40}, 1.0)  # partition 0 was committed before the note: read
    assert db.reads == 1


async def test_another_consumers_note_teaches_nothing() -> None:
    db = Offsets()
    w = waiter(db)
    waiting = asyncio.create_task(w.wait({0: 5}, 3.0))
    await asyncio.sleep(0.05)
    notify(w, commit_note("other-proc", "ctx.records", {0: 100}))
    notify(w, commit_note("proc", "other.topic", {0: 100}))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    db.committed = {0: 6}
    notify(w, commit_note("proc", "ctx.records", {0: 6}))
    await asyncio.wait_for(waiting, 1.0)


def test_a_commit_note_reads_back_as_the_offsets_it_was_written_with() -> None:
    note = commit_note("proc-1", "ctx.records", {3: 17, 0: 5, 12: 1_000_000})
    assert read_commit_note(note, "proc-1", "ctx.records") == {0: 5, 3: 17, 12: 1_000_000}
    assert read_commit_note(note, "proc-2", "ctx.records") is None
    assert read_commit_note(note, "proc-1", "ctx.other") is None
    assert read_commit_note("ctx.records", "proc-1", "ctx.records") is None
    assert read_commit_note(commit_note("p", "t", {}), "p", "t") == {}
    assert read_commit_note("p\x1ft\x1f0:x", "p", "t") is None
