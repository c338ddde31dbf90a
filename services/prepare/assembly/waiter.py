"""Read-your-writes: wait (bounded) until the processor has committed given offsets.

The processor writes ``consumer_offsets`` in the same transaction as the records and
NOTIFYs on commit, so one LISTEN connection wakes every waiter without polling; a slow
poll remains as a safety net in case a notification is missed (e.g. reconnect).

Each notification carries the offsets its commit wrote (``commit_note``): once the
offsets were read once, a commit's note is what waiters learn from, with no read. The
committed offsets are read for all waiters at once, never once per waiter: at the start,
after a poll found no notification, and for a notification without a note (an older
processor's). Each of those starts a new generation, and a waiter joins the read of its
generation if one runs or ran. What is known is kept (offsets only grow), so a prepare
whose appends are already known committed reads nothing at all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import asyncpg

from schemas.errors import NotCommittedYet
from storage.records.offsets import NOTIFY_CHANNEL, committed_offsets, read_commit_note

POLL_S = 0.25  # the safety net's period while a waiter waits without notification


class Waiter(Protocol):
    """Port: waiting for the session processor's commits."""

    async def wait(self, offsets: dict[int, int], timeout: float) -> None:
        """Until every ``partition: offset`` is committed; ``NotCommittedYet`` after
        ``timeout`` seconds."""

    async def changed(self, timeout: float) -> None:
        """Sleep until the processor's next commit (or ``timeout``)."""


class CommitWaiter:
    def __init__(
        self,
        pool: asyncpg.Pool,
        consumer: str,
        topic: str,
        read: Callable[[], Awaitable[dict[int, int]]] | None = None,
    ) -> None:
        """``read``: the committed offsets of every partition (default: PostgreSQL's
        ``consumer_offsets`` of ``consumer`` and ``topic``)."""
        self.pool = pool
        self.consumer = consumer
        self.topic = topic
        self._read_offsets = read or (lambda: committed_offsets(pool, consumer, topic))
        self._known: dict[int, int] = {}  # partition -> next offset, the highest read
        self._generation = 0  # notifications (and polls) so far
        self._read: asyncio.Future[None] | None = None
        self._read_generation = -1
        self._notified = asyncio.Event()  # replaced at each notification
        self._conn: asyncpg.Connection | None = None

    async def start(self, dsn: str) -> None:
        self._conn = await asyncpg.connect(dsn)
        await self._conn.add_listener(NOTIFY_CHANNEL, self._on_notify)

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        offsets = read_commit_note(payload, self.consumer, self.topic)
        self._next_generation()
        if offsets is None:
            return
        self._learn(offsets)
        read = self._read
        if read is not None and read.done() and not read.cancelled() and not read.exception():
            # Everything known before this commit was read or heard: its note is this
            # generation's read.
            self._read_generation = self._generation

    def _learn(self, offsets: dict[int, int]) -> None:
        for p, o in offsets.items():
            self._known[p] = max(self._known.get(p, 0), o)

    def _next_generation(self) -> None:
        self._generation += 1
        notified, self._notified = self._notified, asyncio.Event()
        notified.set()

    async def changed(self, timeout: float) -> None:
        """Sleep until the processor's next commit (or ``timeout``)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._notified.wait(), timeout)

    def known(self, offsets: dict[int, int]) -> bool:
        """Every offset of ``offsets`` is known committed (no read)."""
        return all(self._known.get(p, 0) > off for p, off in offsets.items())

    async def committed(self, offsets: dict[int, int]) -> bool:
        """Whether ``offsets`` are committed, by a read of this generation."""
        if self.known(offsets):
            return True
        read = self._read
        stale = read is None or self._read_generation < self._generation
        failed = read is not None and read.done() and (read.cancelled() or read.exception())
        if stale or failed:
            self._read_generation = self._generation
            read = self._read = asyncio.ensure_future(self._read_all())
        assert read is not None
        await asyncio.shield(read)  # a waiter that gives up leaves the read to the others
        return self.known(offsets)

    async def _read_all(self) -> None:
        self._learn(await self._read_offsets())

    async def wait(self, offsets: dict[int, int], timeout: float) -> None:
        if not offsets or self.known(offsets):
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            notified = self._notified
            if await self.committed(offsets):
                return
            left = deadline - loop.time()
            if left <= 0:
                raise NotCommittedYet(
                    "the runtime's last append is not committed yet; retry shortly",
                    offsets={str(k): v for k, v in offsets.items()},
                    waited_s=timeout,
                )
            try:
                await asyncio.wait_for(notified.wait(), min(left, POLL_S))
            except TimeoutError:
                if self._notified is notified:  # no notification meanwhile: read again
                    self._next_generation()
