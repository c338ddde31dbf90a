"""The processor's metrics helpers (SPEC R18, issue 12): dead letters counted by reason as
they are sent, and what one handled batch moves."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from schemas.wire import DeadLetter, encode_dead_letter
from streams.metrics import MeteredPublisher, observe_batch
from tests.unit.fakes.publisher import FakePublisher

pytestmark = pytest.mark.spec("R18")


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _dead(code: str) -> bytes:
    return encode_dead_letter(DeadLetter(code, "why", "t", 0, 1, None, None, "s", "k", 0))


async def test_dead_letters_are_counted_by_reason_and_passed_through() -> None:
    inner = FakePublisher()
    pub = MeteredPublisher(inner, "dlq")
    before = _value("agentloom_dead_letters_total", reason="test_reason_a")
    await pub.send("dlq", b"s", _dead("test_reason_a"))
    await pub.send_and_wait("dlq", b"s", _dead("test_reason_a"))
    await pub.send("other", b"s", _dead("test_reason_a"))  # not the dead-letter topic
    await pub.send_advisory("dlq", b"s", b"not avro")
    await pub.flush()
    assert _value("agentloom_dead_letters_total", reason="test_reason_a") == before + 2
    assert _value("agentloom_dead_letters_total", reason="undecodable") >= 1
    assert [m.topic for m in inner.sent] == ["dlq", "dlq", "other", "dlq"]
    assert len(inner.flushed) == 2


def test_a_batch_moves_size_time_latency_and_lag() -> None:
    count = "agentloom_append_committed_seconds_count"
    before = (
        _value("agentloom_processor_batch_size_sum"),
        _value("agentloom_processor_batch_seconds_count"),
        _value(count),
    )
    now_ms = int(time.time() * 1000)
    # Three records; one without a timestamp (0) is left out of the latency.
    observe_batch(3, 0.01, [now_ms - 50, now_ms + 10_000, 0], {0: 4, 3: -1}, "test-group")
    assert _value("agentloom_processor_batch_size_sum") == before[0] + 3
    assert _value("agentloom_processor_batch_seconds_count") == before[1] + 1
    assert _value(count) == before[2] + 2
    assert _value("agentloom_consumer_lag", group="test-group", partition="0") == 4
    assert _value("agentloom_consumer_lag", group="test-group", partition="3") == 0
