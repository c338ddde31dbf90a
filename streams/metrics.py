"""Prometheus metrics of the session processor (SPEC R18), served on
``ALC_METRICS_PORT`` when set.

The families every consumer process shares (dead letters, consumer lag, batch size) are
defined here, at the lowest layer that moves them; ``services.metrics`` re-exports them,
so that a process importing both registers each name once.

Both drivers call ``observe_batch`` after ``handle_or_exit`` returned — that is, after
the PostgreSQL commit and the acknowledged publishes, the moment a record counts as
committed for its reader.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Mapping, Sequence

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from schemas.wire import decode_dead_letter
from streams.kafka.publish import Delivery, Message, Publisher

PROCESSOR_BATCH_SIZE = Histogram(
    "agentloom_processor_batch_size",
    "Records per processor batch",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000),
)
PROCESSOR_BATCH_SECONDS = Histogram(
    "agentloom_processor_batch_seconds",
    "One processor batch: decode, the PostgreSQL transaction, publishes acknowledged",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
APPEND_COMMITTED_SECONDS = Histogram(
    "agentloom_append_committed_seconds",
    "From an append (the record's Kafka timestamp) to its batch committed and published",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
DEAD_LETTERS = Counter(
    "agentloom_dead_letters_total",
    "Dead letters by reason (written by this process; in analytics: seen by its group)",
    ["reason"],
)
CONSUMER_LAG = Gauge(
    "agentloom_consumer_lag",
    "Messages behind the partition's end offset, per consumer group and partition",
    ["group", "partition"],
)


def serve(port: int, host: str = "127.0.0.1") -> None:
    """Serve ``/metrics`` from a background thread (prometheus-client's own server)."""
    start_http_server(port, addr=host)


def observe_batch(
    size: int,
    seconds: float,
    appended_at_ms: Iterable[int],
    lag: Mapping[int, int],
    group: str,
) -> None:
    """One handled batch: its size and time, each record's append→committed latency
    (records without a timestamp are left out), and the lag of the partitions it came
    from (end offset - next offset, as the consumer last saw the end)."""
    PROCESSOR_BATCH_SIZE.observe(size)
    PROCESSOR_BATCH_SECONDS.observe(seconds)
    now_ms = time.time() * 1000
    for at in appended_at_ms:
        if at > 0:
            # Clocks of two hosts: never a negative latency.
            APPEND_COMMITTED_SECONDS.observe(max(0.0, now_ms - at) / 1000)
    for partition, behind in lag.items():
        CONSUMER_LAG.labels(group, str(partition)).set(max(0, behind))


class MeteredPublisher:
    """A ``Publisher`` that counts the dead letters it sends, by reason code. Dead
    letters are rare, so decoding them again here costs nothing that matters."""

    def __init__(self, inner: Publisher, topic_dead_letter: str) -> None:
        self.inner = inner
        self.topic_dead_letter = topic_dead_letter
        # Also tallied here, for a process whose /metrics another serves (streams.drivers.worker).
        self.tally: collections.Counter[str] = collections.Counter()

    def _count(self, topic: str, value: bytes) -> None:
        if topic == self.topic_dead_letter:
            try:
                reason = decode_dead_letter(value).reason_code
            except Exception:  # a metric must never stop a publish
                reason = "undecodable"
            DEAD_LETTERS.labels(reason).inc()
            self.tally[reason] += 1

    async def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        await self.inner.send(topic, key, value)
        self._count(topic, value)

    async def send_many(self, messages: Sequence[Message]) -> None:
        await self.inner.send_many(messages)
        for topic, _, value in messages:
            self._count(topic, value)

    async def flush(self) -> None:
        await self.inner.flush()

    async def send_and_wait(self, topic: str, key: bytes | None, value: bytes) -> Delivery:
        delivery = await self.inner.send_and_wait(topic, key, value)
        self._count(topic, value)
        return delivery

    async def send_advisory(self, topic: str, key: bytes | None, value: bytes) -> None:
        await self.inner.send_advisory(topic, key, value)
        self._count(topic, value)
