"""The compaction service's consumer loop: fetch requests while there is room,
run them concurrently (``dispatch.Dispatcher``), commit each partition's offset up to its
first unfinished request, and hand partitions over cleanly on a rebalance.

Several processes share the group; each joins with its own static instance id
(``streams.instance.claim_instance_id``), so a restarted process takes its partitions
back without a rebalance.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from aiokafka import ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError

from services import metrics
from services.compaction.dispatch import Dispatcher

log = logging.getLogger("agentloom.compaction")
FETCH_WAIT_MS = 200
STOP_GRACE_S = 20.0  # a graceful stop lets running jobs finish this long, then commits
REVOKE_GRACE_S = 30.0  # a revoked partition's running jobs get this long to finish


class RequestConsumer(Protocol):
    """What the loop uses of ``aiokafka.AIOKafkaConsumer`` (a fake in unit tests)."""

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]: ...

    async def commit(self, offsets: dict[TopicPartition, int]) -> Any: ...

    def assignment(self) -> set[TopicPartition]: ...

    def highwater(self, partition: TopicPartition) -> int | None: ...


async def commit(consumer: RequestConsumer, jobs: Dispatcher, group: str) -> None:
    """Commit what finished since the last commit, and report the lag."""
    assigned = set(consumer.assignment())
    offsets = jobs.commits(assigned)
    if offsets:
        try:
            await consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            # A rebalance took the partition meanwhile: its new owner redelivers from
            # the last commit, and finished requests republish their saved outcomes.
            log.warning("commit of %s failed (%s): left to redelivery", offsets, exc)
        else:
            jobs.committed(offsets)
    for tp in assigned:
        report_lag(consumer, jobs, group, tp)


def report_lag(consumer: RequestConsumer, jobs: Dispatcher, group: str, tp: TopicPartition) -> None:
    """Lag as Kafka tools and KEDA see it: the partition's end minus the group's commit."""
    end = consumer.highwater(tp)
    offsets = jobs.offsets.get(tp)
    done = offsets.committed if offsets else None
    if end is None or done is None:
        return  # nothing fetched or committed here yet: no figure of our own
    metrics.CONSUMER_LAG.labels(group, str(tp.partition)).set(max(0, end - done))


async def consume_until(
    stop: asyncio.Event, consumer: RequestConsumer, jobs: Dispatcher, group: str = ""
) -> None:
    """Fetch while there is room, run, commit; on ``stop``, finish (within a grace) and
    commit. Cancelled (or a handler raised), it commits nothing more: what is unfinished
    is redelivered."""
    try:
        while not stop.is_set():
            room = jobs.room()
            if room:
                fetched = await consumer.getmany(timeout_ms=FETCH_WAIT_MS, max_records=room)
                for msgs in fetched.values():
                    for m in msgs:
                        jobs.submit(m)
            else:
                await jobs.wait_progress(FETCH_WAIT_MS / 1000)
            jobs.raise_failures()
            await commit(consumer, jobs, group)
        await jobs.settle(set(jobs.offsets), STOP_GRACE_S)
        await commit(consumer, jobs, group)
    finally:
        await jobs.cancel()


class HandOver(ConsumerRebalanceListener):  # type: ignore[misc]
    """Before a partition goes to another member: let its running jobs finish (within a
    grace) and commit them, so the new owner starts after them instead of redoing them.
    Jobs still running after the grace go on; the new owner's redelivery then finds
    their saved outcome, or saves its own first (``save_outcome`` keeps one)."""

    def __init__(self, jobs: Dispatcher, group: str) -> None:
        self.jobs = jobs
        self.group = group
        self.consumer: RequestConsumer | None = None

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        gone = set(revoked)
        if self.consumer is not None and gone:
            await self.jobs.settle(gone, REVOKE_GRACE_S)
            offsets = self.jobs.commits(gone)
            try:
                if offsets:
                    await self.consumer.commit(offsets)
            except (CommitFailedError, IllegalStateError) as exc:
                log.warning("hand-over commit of %s failed (%s)", offsets, exc)
        self.jobs.forget(gone)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        log.info("compaction partitions assigned: %s", sorted(tp.partition for tp in assigned))
