"""Concurrent compaction jobs: up to ``concurrency`` at once, the requests of
one session one after the other in offset order, and offsets that never pass a request
whose outcome is not yet published.

Why per-session order: the processor expects a session's outcomes in the order it asked
for them, and two jobs of one thread must not summarize the same records side by side.
Why the offset rule: a committed offset says "everything before it is published"; a
crash then redelivers exactly the requests past it, and a redelivered request that had
finished republishes its saved outcome without a model call (R15.3).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiokafka import ConsumerRecord, TopicPartition

log = logging.getLogger("agentloom.compaction")

Handler = Callable[[ConsumerRecord[bytes, bytes]], Awaitable[None]]
IN_FLIGHT_PER_SLOT = 4  # fetched-but-unfinished requests held per concurrency slot


class PartitionOffsets:
    """The requests of one partition taken since its assignment, in offset order."""

    def __init__(self) -> None:
        self._done: dict[int, bool] = {}  # offset -> finished; insertion = offset order
        self.position: int | None = None  # next offset after the leading finished run
        self.committed: int | None = None

    def add(self, offset: int) -> None:
        self._done[offset] = False

    def finish(self, offset: int) -> None:
        self._done[offset] = True
        while self._done:
            first = next(iter(self._done))
            if not self._done[first]:
                break  # never past an unfinished request
            del self._done[first]
            self.position = first + 1

    @property
    def pending(self) -> int:
        return len(self._done)

    def to_commit(self) -> int | None:
        """The offset to commit now, if it moved since the last commit."""
        return self.position if self.position != self.committed else None


class Dispatcher:
    """Runs ``handle`` for each submitted request as its own task. ``handle`` publishes
    the request's outcome (or dead-letters it) before it returns; if it raises, the
    request stays unfinished and its partition's offset never passes it."""

    def __init__(self, handle: Handler, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"compaction concurrency must be >= 1, got {concurrency}")
        self._handle = handle
        self._slots = asyncio.Semaphore(concurrency)
        self.max_in_flight = concurrency * IN_FLIGHT_PER_SLOT
        self.offsets: dict[TopicPartition, PartitionOffsets] = {}
        self._tails: dict[tuple[TopicPartition, bytes | None], asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._progress = asyncio.Event()
        self._failures: list[BaseException] = []
        self.running = 0  # jobs inside ``handle`` now (tests read it)

    def room(self) -> int:
        """How many more requests may be taken before some finish."""
        return max(0, self.max_in_flight - len(self._tasks))

    def submit(self, m: ConsumerRecord[bytes, bytes]) -> None:
        tp = TopicPartition(m.topic, m.partition)
        offsets = self.offsets.setdefault(tp, PartitionOffsets())
        offsets.add(m.offset)
        # the message key is the session id (streams.outgoing): one chain per session.
        key = (tp, m.key)
        task = asyncio.create_task(self._run(m, offsets, self._tails.get(key)))
        self._tails[key] = task
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._done(key, t))

    async def _run(
        self,
        m: ConsumerRecord[bytes, bytes],
        offsets: PartitionOffsets,
        before: asyncio.Task[None] | None,
    ) -> None:
        if before is not None:
            # the session's previous request first; its failure is reported on its own.
            await asyncio.wait({before})
        async with self._slots:
            self.running += 1
            try:
                await self._handle(m)
            finally:
                self.running -= 1
        # ``offsets`` is the tracker of the assignment this request came in: after a
        # revocation it is forgotten, and finishing here touches nothing current.
        offsets.finish(m.offset)

    def _done(self, key: tuple[TopicPartition, bytes | None], task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._tails.get(key) is task:
            del self._tails[key]
        if not task.cancelled() and task.exception() is not None:
            self._failures.append(task.exception())  # type: ignore[arg-type]
        self._progress.set()

    def raise_failures(self) -> None:
        """Re-raise what a handler raised: the loop stops uncommitted past it."""
        if self._failures:
            raise self._failures[0]

    async def wait_progress(self, timeout: float) -> None:
        """Until some request finishes, or ``timeout``."""
        self._progress.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._progress.wait(), timeout)

    def commits(self, assigned: set[TopicPartition]) -> dict[TopicPartition, int]:
        """Offsets to commit for the ``assigned`` partitions (others may not be)."""
        out = {}
        for tp, offsets in self.offsets.items():
            pos = offsets.to_commit()
            if tp in assigned and pos is not None:
                out[tp] = pos
        return out

    def committed(self, offsets: dict[TopicPartition, int]) -> None:
        for tp, pos in offsets.items():
            if tp in self.offsets:
                self.offsets[tp].committed = pos

    async def settle(self, partitions: set[TopicPartition], timeout: float) -> None:
        """Wait (up to ``timeout``) until the requests taken from ``partitions`` are
        finished; what is still running then goes on, uncommitted."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(self.offsets[tp].pending for tp in partitions if tp in self.offsets):
            left = deadline - loop.time()
            if left <= 0:
                return
            await self.wait_progress(left)

    def forget(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self.offsets.pop(tp, None)

    async def cancel(self) -> None:
        """Stop every task (a crash or the end of a graceful stop's grace)."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
