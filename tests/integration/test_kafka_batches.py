"""``streams.kafka.batches`` against the real broker: messages sent through aiokafka's
batch API land where ``send`` would put them, in order, at the offsets reported, with
their headers — also when a partition's messages overflow one batch (issue 13)."""

from __future__ import annotations

import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import MessageSizeTooLargeError

from schemas.settings import Settings
from streams.kafka.auth import kafka_auth
from streams.kafka.batches import LARGE_BYTES, OutMessage, send_in_batches
from streams.kafka.partitioning import cached_partitioner
from streams.kafka.publish import AiokafkaPublisher
from streams.kafka.topics import ensure_topics
from tests.support.kafka import auth
from tests.support.services import made_topic
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


async def _topic(stack: Stack, partitions: int = 4) -> str:
    name = made_topic(f"tb{uuid.uuid4().hex[:8]}")
    await ensure_topics(
        Settings(kafka_bootstrap=stack.kafka_bootstrap, topic_partitions=partitions), [name]
    )
    return name


async def _read_all(
    stack: Stack, topic: str, count: int, partitions: int
) -> dict[tuple[int, int], tuple]:  # type: ignore[type-arg]
    """(partition, offset) → (key, value, headers) of the first ``count`` messages."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=stack.kafka_bootstrap, **auth(), auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        out: dict[tuple[int, int], tuple] = {}  # type: ignore[type-arg]
        while len(out) < count:
            for tp, msgs in (await consumer.getmany(timeout_ms=2000)).items():
                for m in msgs:
                    out[(tp.partition, m.offset)] = (m.key, m.value, list(m.headers))
        return out
    finally:
        await consumer.stop()


@pytest.mark.spec("R15.3")
async def test_batched_messages_land_where_send_would_put_them_in_order(stack: Stack) -> None:
    topic = await _topic(stack)
    # A small max batch: the 600 messages overflow several batches per partition.
    producer = AIOKafkaProducer(
        bootstrap_servers=stack.kafka_bootstrap,
        **auth(),
        acks="all",
        enable_idempotence=True,
        max_batch_size=16 * 1024,
        partitioner=cached_partitioner,
    )
    await producer.start()
    try:
        messages: list[OutMessage] = [
            (topic, f"sess-{i % 7}".encode(), f"{i:05d}".encode() * 60, [("n", str(i).encode())])
            for i in range(600)
        ]
        placed = await send_in_batches(producer, messages)
        where = [await p.delivered() for p in placed]
        reference = await producer.send_and_wait(topic, b"reference", key=b"sess-3")
    finally:
        await producer.stop()
    assert len({id(p.future) for p in placed}) > 8  # overflowed: 2+ batches a partition
    read = await _read_all(stack, topic, 601, 4)
    for i, (partition, offset) in enumerate(where):
        key, value, headers = read[(partition, offset)]
        assert (key, value, headers) == (messages[i][1], messages[i][2], messages[i][3])
    # Kafka's mapping of the key, like send: sess-3's batched messages share its partition.
    assert {where[i][0] for i in range(3, 600, 7)} == {reference.partition}
    # Per key, offsets rise in the order given (one session's order is kept).
    for k in range(7):
        offsets = [where[i] for i in range(k, 600, 7)]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


@pytest.mark.spec("R15.3")
async def test_publisher_send_many_is_acknowledged_by_flush(stack: Stack) -> None:
    topic = await _topic(stack, partitions=2)
    pub = AiokafkaPublisher(stack.kafka_bootstrap, kafka_auth(Settings(), "admin"))
    await pub.start()
    try:
        await pub.send_many([(topic, f"k{i % 3}".encode(), str(i).encode()) for i in range(50)])
        await pub.send_many([(topic, None, b"keyless")])  # send's path: random partition
        await pub.flush()
    finally:
        await pub.stop()
    read = await _read_all(stack, topic, 51, 2)
    values = sorted(v for _, v, _ in read.values())
    assert values == sorted([str(i).encode() for i in range(50)] + [b"keyless"])


@pytest.mark.spec("R15.3")
async def test_a_large_message_keeps_its_place_and_an_oversized_one_fails_alone(
    stack: Stack,
) -> None:
    """Over ``LARGE_BYTES`` a message takes ``send``'s path after what came before it:
    order and offsets hold, and one over the producer's limit is refused at once by the
    client (as ``send`` always did) instead of sinking the batch beside it."""
    topic = await _topic(stack, partitions=1)
    producer = AIOKafkaProducer(
        bootstrap_servers=stack.kafka_bootstrap, **auth(), acks="all", enable_idempotence=True
    )
    await producer.start()
    try:
        big = b"B" * (LARGE_BYTES + 1)
        messages: list[OutMessage] = [(topic, b"s", b"m%d" % i, None) for i in range(5)]
        messages += [(topic, b"s", big, None)]
        messages += [(topic, b"s", b"m%d" % i, None) for i in range(5, 10)]
        placed = await send_in_batches(producer, messages)
        where = [await p.delivered() for p in placed]
        assert [o for _, o in where] == list(range(11))  # one partition: 0..10 in order
        with pytest.raises(MessageSizeTooLargeError):
            await send_in_batches(
                producer, [(topic, b"s", b"before", None), (topic, b"s", b"X" * (2 << 20), None)]
            )
        await producer.flush()
    finally:
        await producer.stop()
    read = await _read_all(stack, topic, 12, 1)
    assert [read[(0, o)][1] for o in range(12)] == [m[2] for m in messages] + [b"before"]
