"""Context events on the records topic: our encoding over the one Kafka adapter
(``streams.publish``). Keyed by session_id, so one session's events keep their order.

``send_event`` returns where the event landed once the broker acknowledged it; the
caller passes that offset to prepare, which waits for exactly that append
(read-your-writes).

The runtime's bus sends the current trace context in each message's headers
(``streams.tracing``): the processor's commit span joins the append's trace.
"""

from __future__ import annotations

from aiokafka import AIOKafkaProducer

from schemas.contracts import ContextEvent
from schemas.wire import ControlEvent, encode_control, encode_event
from streams import tracing
from streams.kafka_batches import send_in_batches
from streams.publish import AiokafkaPublisher, Delivery, Publisher


async def send_event(publisher: Publisher, topic: str, event: ContextEvent) -> Delivery:
    """Publish one event and wait for its acknowledgement."""
    return await publisher.send_and_wait(
        topic, event.scope.session_id.encode(), encode_event(event)
    )


async def send_control(publisher: Publisher, topic: str, event: ControlEvent) -> None:
    """Queue a control event on the session's partition without waiting for the ack:
    observations are advisory, and a prepare must not pay a broker round trip."""
    await publisher.send_advisory(topic, event.session_id.encode(), encode_control(event))


class EventBus:
    """A runtime's producer of context events (the SDK, load tools): an
    ``AiokafkaPublisher`` and the highest offset acknowledged per partition, which the
    runtime hands to prepare as ``after``."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.publisher = AiokafkaPublisher(bootstrap)
        self.last_offsets: dict[int, int] = {}

    @property
    def _producer(self) -> AIOKafkaProducer:
        """The driver itself: tests inject raw (even malformed) messages through it."""
        return self.publisher.producer

    async def start(self) -> None:
        await self.publisher.start()

    async def stop(self) -> None:
        await self.publisher.stop()

    async def send(self, event: ContextEvent) -> tuple[int, int]:
        md = await self.publisher.send_and_wait(
            self.topic,
            event.scope.session_id.encode(),
            encode_event(event),
            headers=tracing.kafka_headers(),
        )
        self._remember(md.partition, md.offset)
        return md.partition, md.offset

    async def send_many(self, events: list[ContextEvent]) -> list[tuple[int, int]]:
        """Pipelined through aiokafka's batch API (``streams.kafka_batches``): each event
        is encoded and queued (the first batches go out while the rest are encoded), then
        all are awaited. Order per session is kept: one key maps to one partition, and a
        partition's messages keep their order. Returns each event's (partition, offset).
        Every event carries the trace context current at the call."""
        headers = tracing.kafka_headers()
        placed = await send_in_batches(
            self.publisher.producer,
            ((self.topic, e.scope.session_id.encode(), encode_event(e), headers) for e in events),
        )
        out = []
        for p in placed:
            partition, offset = await p.delivered()
            self._remember(partition, offset)
            out.append((partition, offset))
        return out

    def _remember(self, partition: int, offset: int) -> None:
        if offset > self.last_offsets.get(partition, -1):
            self.last_offsets[partition] = offset
