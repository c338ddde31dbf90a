"""Context events on the records topic: our encoding over the one Kafka adapter
(``streams.kafka.publish``). Keyed by session_id, so one session's events keep their order.

``send_event`` returns where the event landed once the broker acknowledged it; the
caller passes that offset to prepare, which waits for exactly that append
(read-your-writes).

The runtime's bus sends the current trace context in each message's headers
(``streams.tracing``): the processor's commit span joins the append's trace.
"""

from __future__ import annotations

from collections import OrderedDict

from aiokafka import AIOKafkaProducer

from domain.auth import key_id_of
from domain.context.envelope import KeySigner
from schemas.contracts import ContextEvent
from schemas.settings import Settings
from schemas.wire import ControlEvent, encode_control, encode_event
from streams import tracing
from streams.kafka.auth import KafkaAuth, kafka_auth
from streams.kafka.batches import send_in_batches
from streams.kafka.publish import AiokafkaPublisher, Delivery, Publisher


async def send_event(publisher: Publisher, topic: str, event: ContextEvent) -> Delivery:
    """Publish one event and wait for its acknowledgement."""
    return await publisher.send_and_wait(
        topic, event.scope.session_id.encode(), encode_event(event)
    )


async def send_control(publisher: Publisher, topic: str, event: ControlEvent) -> None:
    """Queue a control event on the session's partition without waiting for the ack:
    observations are advisory, and a prepare must not pay a broker round trip."""
    await publisher.send_advisory(topic, event.session_id.encode(), encode_control(event))


SESSIONS_REMEMBERED = 100_000  # sessions whose own last append a bus keeps (LRU)


class EventBus:
    """A runtime's producer of context events (the SDK, load tools): an
    ``AiokafkaPublisher``, the highest offset acknowledged per partition, and each
    session's own last append; the runtime hands ``after(session_id)`` to prepare.

    ``api_key``: the runtime's host key of its space; every event is signed with it
    (domain.context.envelope), and the processor refuses an event whose space is not the key's.
    ``auth``: the broker credentials; by default the ``runtime`` principal of the
    settings read from the environment (streams.kafka.auth)."""

    def __init__(
        self, bootstrap: str, topic: str, api_key: str | None, auth: KafkaAuth | None = None
    ) -> None:
        self.topic = topic
        signer = signer_for(api_key)
        self.publisher = AiokafkaPublisher(
            bootstrap, auth or kafka_auth(Settings(), "runtime"), signer=signer
        )
        self.last_offsets: dict[int, int] = {}
        self._sessions: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def after(self, session_id: str) -> dict[str, int]:
        """What a prepare (or a run's start, resume or finish) in ``session_id`` waits
        for: the session's own last append — one session is one key, so one partition,
        and its view holds its own records only. Other sessions' appends on other
        partitions are not waited for. A session this bus no longer remembers (past
        ``SESSIONS_REMEMBERED``) or never appended to waits for every partition's last
        append, as before any was known."""
        own = self._sessions.get(session_id)
        if own is None:
            return {str(p): o for p, o in self.last_offsets.items()}
        return {str(own[0]): own[1]}

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
        self._remember(event.scope.session_id, md.partition, md.offset)
        return md.partition, md.offset

    async def send_many(self, events: list[ContextEvent]) -> list[tuple[int, int]]:
        """Pipelined through aiokafka's batch API (``streams.kafka.batches``): each event
        is encoded and queued (the first batches go out while the rest are encoded), then
        all are awaited. Order per session is kept: one key maps to one partition, and a
        partition's messages keep their order. Returns each event's (partition, offset).
        Every event carries the trace context current at the call."""
        headers = tracing.kafka_headers()
        placed = await send_in_batches(
            self.publisher.producer,
            (self._message(e, headers) for e in events),
        )
        out = []
        for e, p in zip(events, placed, strict=True):
            partition, offset = await p.delivered()
            self._remember(e.scope.session_id, partition, offset)
            out.append((partition, offset))
        return out

    def _message(
        self, e: ContextEvent, headers: list[tuple[str, bytes]] | None
    ) -> tuple[str, bytes, bytes, list[tuple[str, bytes]] | None]:
        key, value = e.scope.session_id.encode(), encode_event(e)
        return self.topic, key, value, self.publisher._signed(key, value, headers)

    def _remember(self, session_id: str, partition: int, offset: int) -> None:
        if offset > self.last_offsets.get(partition, -1):
            self.last_offsets[partition] = offset
        own = self._sessions.pop(session_id, None)
        if own is None or own[0] != partition or offset > own[1]:
            own = (partition, offset)
        self._sessions[session_id] = own
        if len(self._sessions) > SESSIONS_REMEMBERED:
            self._sessions.popitem(last=False)


def signer_for(api_key: str | None) -> KeySigner | None:
    """The envelope signer of a runtime's API key; ``None`` without a key (its events are
    refused as ``unauthenticated_event``: the processor accepts no unsigned event)."""
    key_id = key_id_of(api_key)
    if api_key is None or key_id is None:
        return None
    return KeySigner.of(key_id, api_key)
