"""Batches of a faust stream that keep being read while the previous one is applied.

faust's ``take_events`` stops filling its buffer while its loop body runs, so with the
processor in a child process (``streams.drivers.offload``) the two would only take turns: faust
reads, the child applies, faust reads. Here the agent iterates a ``noack`` stream and
this class cuts batches and hands them to ``apply`` in offset order, at most ``depth`` at
a time, while the agent goes on reading the next. A batch is cut at ``max_`` events, once
its first event waited ``within`` seconds, or as soon as no batch is being applied (group
commit): an idle child takes what is there at once, a busy one what came while it
worked — batches as large as the load makes them, and no event waits out a timer for
nothing (a prepare waits for its appends' batch).

Acknowledgement is manual and comes last: a batch's events are acked (and so may have
their offsets committed by faust) only after ``apply`` returned — the PostgreSQL commit
and the acknowledged publishes. An event that was read but not applied is never acked,
so a crash redelivers it. ``apply`` must not return before its batch is applied; when it
cannot be, it ends the process (crash-only), and so does anything else that goes wrong
here, before an ack.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from streams.crash_only import exit_for_redelivery


class PipelinedBatches:
    def __init__(
        self,
        apply: Callable[[list[Any]], Awaitable[object]],
        ack: Callable[[Any], Awaitable[object]],
        max_: int,
        within: float,
        depth: int = 2,
    ) -> None:
        self._apply = apply
        self._ack = ack
        self.max_ = max_
        self.within = within
        # Batches applying at once. ``apply`` of a later batch may be called before an
        # earlier one returned (the child reads the next batch ahead, streams.drivers.worker), so
        # it must apply them in call order; they are settled and acked in that order.
        self.depth = depth
        self._buffer: list[Any] = []
        self._first_at = 0.0
        self._inflight: collections.deque[asyncio.Task[list[Any]]] = collections.deque()
        self._applied: collections.deque[Any] = collections.deque()  # due for acks
        self._lock = asyncio.Lock()
        self._work = asyncio.Event()  # set once an event is buffered: the timer runs
        # Wakes the timer before ``within``: a batch applied, or an event for an idle child.
        self._wake = asyncio.Event()

    async def add(self, event: Any) -> None:
        """Buffer ``event``; a full buffer waits for room in flight, then goes."""
        if not self._buffer:
            self._first_at = time.monotonic()
            self._work.set()
        self._buffer.append(event)
        if len(self._buffer) >= self.max_:
            await self.flush()
        elif not self._busy():
            self._wake.set()  # sent by the timer once this burst of events is read

    def _busy(self) -> bool:
        return any(not t.done() for t in self._inflight)

    async def flush(self) -> None:
        """Send what is buffered once fewer than ``depth`` batches are in flight; then
        ack the batches applied meanwhile, oldest first. Acking 2,000 events takes
        milliseconds: the next batch is already with the child meanwhile."""
        async with self._lock:
            while self._inflight and (
                len(self._inflight) >= self.depth or self._inflight[0].done()
            ):
                await self._settle_oldest()
            if self._buffer:
                events, self._buffer = self._buffer, []
                self._inflight.append(asyncio.create_task(self._run(events)))
            await self._ack_applied()

    async def drain(self) -> None:
        """Apply everything buffered and wait for it (a stopping stream)."""
        await self.flush()
        async with self._lock:
            while self._inflight:
                await self._settle_oldest()
            await self._ack_applied()

    async def _settle_oldest(self) -> None:
        """Wait for the oldest batch in flight; its events are then due for acks."""
        # Shielded, and forgotten only once done: a cancelled waiter (the stopping timer)
        # neither cancels a batch half-way through the child's transaction nor lets a
        # later batch be acked before it.
        events = await asyncio.shield(self._inflight[0])
        self._inflight.popleft()
        self._applied.extend(events)

    async def _run(self, events: list[Any]) -> list[Any]:
        try:
            await self._apply(events)
            self._wake.set()
            return events
        except asyncio.CancelledError:
            raise  # the worker stops: nothing acked that was not applied
        except BaseException:
            exit_for_redelivery("batch pipeline failed: exiting; the batch is redelivered")

    async def _ack_applied(self) -> None:
        try:
            while self._applied:
                await self._ack(self._applied[0])
                self._applied.popleft()
        except Exception:
            exit_for_redelivery(
                "acking an applied batch failed: exiting; it is redelivered (a no-op)"
            )

    async def tick(self) -> None:
        """Forever: send the buffer when no batch is being applied, or once it waited
        ``within``, and ack a batch applied since (a quiet stream still flows and commits
        its offsets). With nothing buffered, in flight or due for acks it waits for the
        next event instead: an idle processor does not wake every ``within``."""
        while True:
            if not (self._buffer or self._inflight or self._applied):
                self._work.clear()
                await self._work.wait()
            # (asyncio.timeout, not wait_for: wait_for swallows a cancellation that comes
            # as the event is set — a batch applied just as the timer is stopped — and
            # the stopped timer would then wait for work for ever.)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.within):
                    await self._wake.wait()
            self._wake.clear()
            stale = self._buffer and time.monotonic() - self._first_at >= self.within
            due = self._buffer and (stale or not self._busy())
            if due or (self._inflight and self._inflight[0].done()):
                await self.flush()


@contextlib.asynccontextmanager
async def ticking(batches: PipelinedBatches) -> Any:
    """``batches`` with its timer running for the body's duration."""
    ticker = asyncio.create_task(batches.tick())
    try:
        yield batches
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
