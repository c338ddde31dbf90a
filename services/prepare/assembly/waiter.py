"""Read-your-writes: wait (bounded) until the processor has committed given offsets.

The processor writes ``consumer_offsets`` in the same transaction as the records and
NOTIFYs on commit, so one LISTEN connection wakes every waiter without polling; a slow
poll remains as a safety net in case a notification is missed (e.g. reconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

import asyncpg

from schemas.errors import NotCommittedYet
from storage.records.ingest import NOTIFY_CHANNEL
from storage.records.offsets import committed_offsets


class Waiter(Protocol):
    """Port: waiting for the session processor's commits."""

    async def wait(self, offsets: dict[int, int], timeout: float) -> None:
        """Until every ``partition: offset`` is committed; ``NotCommittedYet`` after
        ``timeout`` seconds."""

    async def changed(self, timeout: float) -> None:
        """Sleep until the processor's next commit (or ``timeout``)."""


class CommitWaiter:
    def __init__(self, pool: asyncpg.Pool, consumer: str, topic: str) -> None:
        self.pool = pool
        self.consumer = consumer
        self.topic = topic
        self._changed = asyncio.Event()
        self._conn: asyncpg.Connection | None = None

    async def start(self, dsn: str) -> None:
        self._conn = await asyncpg.connect(dsn)
        await self._conn.add_listener(NOTIFY_CHANNEL, self._on_notify)

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()

    def _on_notify(self, *_: Any) -> None:
        self._changed.set()

    async def changed(self, timeout: float) -> None:
        """Sleep until the processor's next commit (or ``timeout``)."""
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    async def committed(self, offsets: dict[int, int]) -> bool:
        done = await committed_offsets(self.pool, self.consumer, self.topic, list(offsets))
        return all(done.get(p, 0) > off for p, off in offsets.items())

    async def wait(self, offsets: dict[int, int], timeout: float) -> None:
        if not offsets:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            self._changed.clear()
            if await self.committed(offsets):
                return
            left = deadline - loop.time()
            if left <= 0:
                raise NotCommittedYet(
                    "the runtime's last append is not committed yet; retry shortly",
                    offsets={str(k): v for k, v in offsets.items()},
                    waited_s=timeout,
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 0.25))
