"""Many messages sent through aiokafka's batch API (``create_batch``/``send_batch``).

``AIOKafkaProducer.send`` costs ~35 µs of Python a message on our machines (a future, the
partitioner, the accumulator's bookkeeping): the processor paid it for every committed
record and the SDK for every appended event, ~10 % of the processor's CPU.
Appending to a ``BatchBuilder`` is one call into aiokafka's C record builder: measured
~6 µs a message, beside ~35 µs for ``send``, against the same broker.

The guarantees are the producer's own, unchanged:
- each message goes to the partition ``send`` would pick (``streams.kafka.partitioning``: Kafka's
  mapping of the key), so one session's messages stay on one partition;
- within a partition the messages keep the order given: a partition's batch is submitted
  before the next one for it is started, and the accumulator keeps one queue per partition;
- the idempotent producer gives every batch its sequence numbers when it is drained,
  exactly as for the batches ``send`` fills (``acks=all`` applies to both).

A keyless message (never ours: every topic is keyed by session) takes ``send``'s path,
which picks a random available partition. So does a large one (over ``LARGE_BYTES``),
after its partition's batch so far: ``send`` refuses a message over the producer's
``max_request_size`` at once, where a batch holding it would be refused by the broker
with every message beside it.
"""

from __future__ import annotations

import asyncio
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer

from streams.kafka.partitioning import partition_for
from streams.tracing import KafkaHeaders

# (topic, key, value, headers)
OutMessage = tuple[str, bytes | None, bytes, KafkaHeaders | None]


@dataclass(frozen=True)
class Placed:
    """Where one message went: its batch's future (resolving to the batch's first
    offset, or to the message's own metadata for a keyless one) and its offset in it."""

    future: asyncio.Future[Any]
    relative_offset: int

    async def delivered(self) -> tuple[int, int]:
        """(partition, offset) once the broker acknowledged the message."""
        md = await self.future
        return md.partition, md.offset + self.relative_offset


class _Open:
    """A partition's batch being filled, and the messages appended to it so far."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, partition: int) -> None:
        self.batch = producer.create_batch()
        self.topic = topic
        self.partition = partition
        self.members: list[int] = []


LARGE_BYTES = 256 * 1024

# A partition's batch is submitted once it holds this many messages, and the loop then
# yields: the sender transmits it while the caller goes on encoding, so the broker and
# the processor start on the first messages of a long list (the SDK's ``send_many``)
# instead of after the last one. 500 messages of ~300 B: ~150 kB a request.
SUBMIT_EVERY = 500


async def send_in_batches(
    producer: AIOKafkaProducer, messages: Iterable[OutMessage], submit_every: int = SUBMIT_EVERY
) -> list[Placed]:
    """Queue ``messages`` (each tracked by the returned ``Placed``, in the same order).
    ``messages`` may be a generator: each is encoded only when its turn comes, after the
    batches before it went out."""
    placed: list[Placed | None] = []
    open_: dict[tuple[str, int], _Open] = {}
    partitions: dict[str, list[int]] = {}

    async def submit(o: _Open) -> None:
        fut = await producer.send_batch(o.batch, o.topic, partition=o.partition)
        for rel, i in enumerate(o.members):
            placed[i] = Placed(fut, rel)

    for i, (topic, key, value, headers) in enumerate(messages):
        placed.append(None)
        if key is None:
            placed[i] = Placed(await producer.send(topic, value, headers=headers), 0)
            continue
        if topic not in partitions:
            partitions[topic] = sorted(await producer.partitions_for(topic))
        parts = partitions[topic]
        tp = (topic, parts[partition_for(key, len(parts))])  # as cached_partitioner
        if len(key) + len(value) > LARGE_BYTES:
            if tp in open_:  # what came before it goes first
                await submit(open_.pop(tp))
            placed[i] = Placed(await producer.send(topic, value, key=key, headers=headers), 0)
            continue
        o = open_.get(tp)
        if o is None:
            o = open_[tp] = _Open(producer, *tp)
        if o.batch.append(key=key, value=value, timestamp=None, headers=headers or []) is None:
            # Full: submit it, then start the partition's next batch with this message.
            # (An empty batch takes any message, however large: the broker judges it.)
            await submit(o)
            o = open_[tp] = _Open(producer, *tp)
            if o.batch.append(key=key, value=value, timestamp=None, headers=headers or []) is None:
                raise ValueError(f"message of {len(value)} bytes does not fit a batch")
        o.members.append(i)
        if len(o.members) >= submit_every:
            await submit(o)
            del open_[tp]
            await asyncio.sleep(0)
    for o in open_.values():
        await submit(o)
    assert all(p is not None for p in placed)
    return typing.cast(list[Placed], placed)
