"""A ``streams.kafka.publish.Publisher`` that keeps messages in memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from streams.kafka.publish import Delivery, Message


@dataclass(frozen=True)
class Sent:
    topic: str
    key: bytes | None
    value: bytes
    how: str  # "queued" | "waited" | "advisory"


@dataclass
class FakePublisher:
    """Acknowledges everything; ``fail_next`` makes the next send raise (a broker error).

    ``flushed`` holds the messages a ``flush`` confirmed, in order: a test can assert that
    something was published only after something else was committed.
    """

    sent: list[Sent] = field(default_factory=list)
    flushed: list[Sent] = field(default_factory=list)
    fail_next: Exception | None = None
    _queued: list[Sent] = field(default_factory=list)
    _offsets: dict[str, int] = field(default_factory=dict)

    def _raise_if_failing(self) -> None:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    async def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self._raise_if_failing()
        msg = Sent(topic, key, value, "queued")
        self.sent.append(msg)
        self._queued.append(msg)

    async def send_many(self, messages: Sequence[Message]) -> None:
        for topic, key, value in messages:  # through send: subclasses log each one
            await self.send(topic, key, value)

    async def flush(self) -> None:
        self._raise_if_failing()
        self.flushed.extend(self._queued)
        self._queued.clear()

    async def send_and_wait(self, topic: str, key: bytes | None, value: bytes) -> Delivery:
        self._raise_if_failing()
        self.sent.append(Sent(topic, key, value, "waited"))
        offset = self._offsets.get(topic, -1) + 1
        self._offsets[topic] = offset
        return Delivery(0, offset)

    async def send_advisory(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.sent.append(Sent(topic, key, value, "advisory"))

    def on(self, topic: str) -> list[Sent]:
        return [m for m in self.sent if m.topic == topic]
