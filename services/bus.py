"""Kafka producer for context events: idempotent, ``acks=all``, keyed by session_id.

``send`` returns (partition, offset) once the broker acknowledged the write; the caller
passes these to prepare so that it can wait for exactly that append (read-your-writes).
"""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaProducer

from schemas.contracts import ContextEvent
from schemas.wire import ControlEvent, encode_control, encode_event

log = logging.getLogger(__name__)


def _log_failure(fut: object) -> None:
    exc = fut.exception() if hasattr(fut, "exception") else None  # type: ignore[union-attr]
    if exc is not None:
        log.warning("control event not delivered: %s", exc)


class EventProducer:
    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        # enable_idempotence: a retried send after a lost ack is not written twice.
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=2,
            max_batch_size=1 << 20,
        )
        self.last_offsets: dict[int, int] = {}

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def send(self, event: ContextEvent) -> tuple[int, int]:
        md = await self._producer.send_and_wait(
            self.topic, encode_event(event), key=event.scope.session_id.encode()
        )
        self._remember(md.partition, md.offset)
        return md.partition, md.offset

    async def send_many(self, events: list[ContextEvent]) -> list[tuple[int, int]]:
        """Pipelined: all sends are queued, then awaited (order per session is kept,
        since one key maps to one partition and the idempotent producer keeps order)."""
        futs = [
            await self._producer.send(self.topic, encode_event(e), key=e.scope.session_id.encode())
            for e in events
        ]
        out = []
        for f in futs:
            md = await f
            self._remember(md.partition, md.offset)
            out.append((md.partition, md.offset))
        return out

    async def send_control(self, event: ControlEvent) -> None:
        """Queue a control event on the session's partition without waiting for the ack:
        observations are advisory, and a prepare must not pay a broker round trip."""
        fut = await self._producer.send(
            self.topic, encode_control(event), key=event.session_id.encode()
        )
        fut.add_done_callback(_log_failure)

    async def send_nowait(self, topic: str, key: bytes, value: bytes) -> None:
        """Queue a message without waiting for the ack (observability, advisory)."""
        fut = await self._producer.send(topic, value, key=key)
        fut.add_done_callback(_log_failure)

    def _remember(self, partition: int, offset: int) -> None:
        if offset > self.last_offsets.get(partition, -1):
            self.last_offsets[partition] = offset
