"""The analytics group's loop: fetch, decode and sum the next messages while the previous
batch is written, one transaction at a time.

Two stages overlap: this process decodes and sums (CPU, on the event loop) while
PostgreSQL upserts the previous batch (its own process, so another core). Transactions
stay strictly sequential — a batch is written only after the one before it committed —
so the tracking offsets move in order. Whatever arrives while a write is in flight joins
the next batch (up to ``PENDING_FETCHES`` fetches): under load, batches grow, and rows
that recur across fetches (the histogram buckets of one window) are written once. A
batch is written when it holds a fetch's worth or has waited ``FLUSH_WITHIN_S``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError

from schemas.settings import Settings
from services.analytics.batch import Batch, Dimensions
from storage import analytics as store

log = logging.getLogger("agentloom.analytics")

# A transaction holds at most this many fetches of ``analytics_batch_max`` messages:
# bounded memory and a bounded transaction, while fetching stops (back-pressure).
PENDING_FETCHES = 10
# The longest a message waits for its batch to fill (``take(n, within)``): rollups lag by
# at most this much, and a slow flow still makes few transactions.
FLUSH_WITHIN_S = 0.5


class Pipeline:
    """Consumes ``consumer`` (observability and dead-letter topics) into the rollups."""

    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        consumer: AIOKafkaConsumer,
        on_written: Callable[[int], None] | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.consumer = consumer
        self.dims = Dimensions(pool)
        self.max_pending = settings.analytics_batch_max * PENDING_FETCHES
        self.on_written = on_written
        self.started: float | None = None  # perf_counter of the first message fetched

    def _batch(self) -> Batch:
        return Batch(self.settings.topic_dead_letter)

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set; the batch being written is finished, the one being
        gathered is left to be redelivered (neither its rows nor its offsets moved)."""
        writing: asyncio.Task[None] | None = None
        batch = self._batch()
        try:
            while not stop.is_set():
                if writing is None or (not writing.done() and len(batch) < self.max_pending):
                    await self._fetch(batch, self._wait_ms(batch, writing))
                if writing is not None and (writing.done() or len(batch) >= self.max_pending):
                    await writing  # re-raises a failed write: the service exits
                    writing = None
                if writing is None and self._due(batch):
                    writing = asyncio.create_task(self._write(batch))
                    batch = self._batch()
        finally:
            if writing is not None:
                await writing

    def _due(self, batch: Batch) -> bool:
        """A full fetch's worth, or the oldest message has waited ``FLUSH_WITHIN_S``: a
        trickle of events makes one transaction per interval, not one per message."""
        if not len(batch):
            return False
        full = len(batch) >= self.settings.analytics_batch_max
        return full or time.monotonic() - batch.opened >= FLUSH_WITHIN_S

    def _wait_ms(self, batch: Batch, writing: asyncio.Task[None] | None) -> int:
        """How long a fetch may wait for messages: until the batch is due, if it can be
        written then; otherwise 200 ms (a stop is noticed that soon)."""
        if writing is not None or not len(batch):
            return 200
        left = FLUSH_WITHIN_S - (time.monotonic() - batch.opened)
        return max(1, min(200, int(left * 1000)))

    async def _fetch(self, batch: Batch, timeout_ms: int) -> None:
        fetched = await self.consumer.getmany(
            timeout_ms=timeout_ms, max_records=self.settings.analytics_batch_max
        )
        msgs = [m for part in fetched.values() for m in part]
        if msgs:
            self.started = self.started or time.perf_counter()
            await batch.add(msgs, self.dims)

    async def _write(self, batch: Batch) -> None:
        sums = batch.sums()
        new = await store.apply(self.pool, self.settings.analytics_group, batch.consumed, sums)
        # Only after the database commit: a crash before this redelivers the batch, and
        # the tracking offsets make the redelivery change nothing.
        await self._commit(batch)
        log.debug("applied %d of %d messages", new, len(batch))
        if self.on_written is not None:
            self.on_written(len(batch))

    async def _commit(self, batch: Batch) -> None:
        # Partitions revoked by a rebalance since they were fetched are not ours to
        # commit (aiokafka refuses them); their new owner re-reads from the last commit
        # and the tracking rows skip what this batch applied.
        mine = self.consumer.assignment()
        offsets = {
            tp: nxt
            for (topic, part), nxt in batch.offsets.items()
            if (tp := TopicPartition(topic, part)) in mine
        }
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except CommitFailedError:
            log.warning("offset commit lost to a rebalance; the tracking rows cover it")
