"""The fake publisher honours the port's promises, so tests built on it mean something."""

from __future__ import annotations

import asyncio

import pytest

from streams.kafka.auth import KafkaAuth
from streams.kafka.publish import AiokafkaPublisher, Publisher
from tests.unit.fakes.publisher import FakePublisher


def test_fake_and_real_publishers_satisfy_the_port() -> None:
    async def build() -> list[Publisher]:  # aiokafka wants a running loop
        return [
            FakePublisher(),
            AiokafkaPublisher("127.0.0.1:1", KafkaAuth("PLAINTEXT", "SCRAM-SHA-512")),
        ]

    assert all(callable(p.send_and_wait) for p in asyncio.run(build()))


def test_flush_confirms_only_what_was_queued_before_it() -> None:
    pub = FakePublisher()

    async def go() -> None:
        await pub.send("t", b"k", b"1")
        await pub.flush()
        await pub.send("t", b"k", b"2")

    asyncio.run(go())
    assert [m.value for m in pub.flushed] == [b"1"]
    assert [m.value for m in pub.sent] == [b"1", b"2"]


def test_send_and_wait_returns_increasing_offsets_and_can_fail() -> None:
    pub = FakePublisher()

    async def go() -> list[int]:
        first = await pub.send_and_wait("t", b"k", b"a")
        second = await pub.send_and_wait("t", b"k", b"b")
        pub.fail_next = RuntimeError("broker down")
        with pytest.raises(RuntimeError):
            await pub.send_and_wait("t", b"k", b"c")
        return [first.offset, second.offset]

    assert asyncio.run(go()) == [0, 1]
