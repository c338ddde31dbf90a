"""The faust processor's consumer paused while a batch is applied
(``streams.drivers.in_loop``, ``ALC_PROCESSOR_PAUSE_FETCHING``), against the real
broker: while paused it hands out nothing, not even what a fetch already in flight
brings; resumed, it hands out every record once, from where it stood."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from schemas.settings import Settings
from streams.drivers.app import create_app
from streams.drivers.in_loop import InLoopConsumer
from streams.kafka.topics import ensure_topics
from tests.support.kafka import auth
from tests.support.stack import Stack

pytestmark = pytest.mark.integration

PARTITIONS = 3


async def _nothing(app: object) -> object:
    raise AssertionError("no batch is built here")


async def _read(consumer: AIOKafkaConsumer, count: int) -> list[tuple[int, int]]:
    """(partition, offset) of the next ``count`` records handed out."""
    out: list[tuple[int, int]] = []
    async with asyncio.timeout(30):
        while len(out) < count:
            for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                out += [(tp.partition, m.offset) for m in msgs]
    return out


@pytest.mark.spec("R15.3")
async def test_a_paused_consumer_hands_out_nothing_then_every_record_once(
    stack: Stack, tmp_path: Path
) -> None:
    topic = f"pf{uuid.uuid4().hex[:8]}"
    settings = Settings(kafka_bootstrap=stack.kafka_bootstrap, topic_partitions=PARTITIONS)
    await ensure_topics(settings, [topic])
    app = create_app(settings, tmp_path, _nothing)  # type: ignore[arg-type]
    assert isinstance(app.consumer, InLoopConsumer)
    thread = app.consumer.consumer_thread
    # The consumer the thread's methods act on; a short long-poll, so that a fetch is
    # surely in flight when it is paused (one is sent as soon as the last returned).
    consumer = AIOKafkaConsumer(
        bootstrap_servers=stack.kafka_bootstrap,
        **auth(),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=200,
    )
    producer = AIOKafkaProducer(bootstrap_servers=stack.kafka_bootstrap, **auth(), acks="all")
    await consumer.start()
    await producer.start()
    thread._consumer = consumer
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])

        async def send(n: int, tag: str) -> set[tuple[int, int]]:
            sent = [
                await producer.send_and_wait(topic, f"{tag}{i}".encode(), key=f"s{i}".encode())
                for i in range(n)
            ]
            return {(m.partition, m.offset) for m in sent}

        first = await send(30, "a")
        assert set(await _read(consumer, 30)) == first
        thread.pause_fetching()
        assert consumer.paused() == consumer.assignment()
        second = await send(30, "b")  # arrives while the fetch sent before the pause waits
        assert await consumer.getmany(timeout_ms=1500) == {}
        thread.resume_fetching()
        assert consumer.paused() == set()
        got = await _read(consumer, 30)
        assert sorted(got) == sorted(second)  # every record once, none of the first again
        assert await consumer.getmany(timeout_ms=300) == {}
    finally:
        thread._consumer = None
        await producer.stop()
        await consumer.stop()
