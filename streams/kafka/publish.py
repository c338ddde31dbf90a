"""The one Kafka adapter for writing: a ``Publisher`` port and one implementation per driver.

Every process publishes through this module: the session processor (faust or aiokafka
driver), the compaction service, Prepare and the SDK. One place holds the producer
settings that the guarantees depend on:

- ``acks=all`` and ``enable_idempotence``: an acknowledged write survives a broker loss
  (with ``min.insync.replicas`` > 1) and a retried send after a lost ack is not written
  twice.
- Keys are session ids, so one session's messages land on one partition in order.
- ``linger_ms`` 0 by default: a message goes out at once, and what is sent while a
  request is in flight shares the next one (aiokafka keeps one produce request in flight
  per broker), so batches still form under load. A linger only delayed the awaited sends
  of a runtime or Prepare (each on its own at low load) and cost aiokafka's sender a
  second wake-up per request (~20 % of a lone send's CPU, measured); ``send_many``
  queues all of its batches before the sender runs, so they share a request either way.

Three ways to send, because callers need three different promises:

- ``send`` queues and is tracked: ``flush`` waits until everything queued so far is
  acknowledged (the processor commits offsets only after that). ``send_many`` is ``send``
  for each of several messages, through aiokafka's batch API (``streams.kafka.batches``).
- ``send_and_wait`` waits for this one message and returns where it landed (Prepare
  hands the offset to the caller for read-your-writes; a compaction outcome must be
  written before its request's offset is committed).
- ``send_advisory`` queues without tracking; a failure is logged, never raised
  (observations and observability are advisory and must not cost a round trip).

The two adapters also take optional message ``headers`` (the SDK's bus sends the trace
context in them, ``streams.tracing``); the port leaves them out, since nothing that is
handed a ``Publisher`` sends any.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer

from domain.context.envelope import Signer
from streams.kafka.auth import KafkaAuth
from streams.kafka.batches import send_in_batches
from streams.kafka.partitioning import cached_partitioner
from streams.tracing import KafkaHeaders

log = logging.getLogger(__name__)


# (topic, key, value)
Message = tuple[str, bytes | None, bytes]


@dataclass(frozen=True)
class Delivery:
    """Where an acknowledged message landed."""

    partition: int
    offset: int


class Publisher(Protocol):
    async def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Queue a message; ``flush`` waits until all queued messages are acknowledged."""

    async def send_many(self, messages: Sequence[Message]) -> None:
        """``send`` each of ``messages``, in order."""

    async def flush(self) -> None:
        """Wait for every message queued by ``send`` since the last flush."""

    async def send_and_wait(self, topic: str, key: bytes | None, value: bytes) -> Delivery:
        """Send one message and wait for its acknowledgement."""

    async def send_advisory(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Queue a message nobody waits for; a failed delivery is logged."""


def _log_failure(fut: asyncio.Future[Any]) -> None:
    if fut.cancelled():
        return
    exc = fut.exception()
    if exc is not None:
        log.warning("advisory message not delivered: %s", exc)


class _Tracked:
    """The bookkeeping both drivers share: pending acknowledgements for ``flush``."""

    def __init__(self) -> None:
        self._pending: list[asyncio.Future[Any]] = []

    def _track(self, fut: asyncio.Future[Any]) -> None:
        self._pending.append(fut)

    signer: Signer | None = None

    def _signed(self, key: bytes | None, value: bytes, headers: KafkaHeaders | None) -> Any:
        """``headers`` with this process's envelope (domain.context.envelope) added, if it signs."""
        if self.signer is None:
            return headers
        return [*(headers or ()), *self.signer.headers(key, value)]

    async def _send_batches(self, producer: AIOKafkaProducer, messages: Sequence[Message]) -> None:
        placed = await send_in_batches(
            producer, [(t, k, v, self._signed(k, v, None)) for t, k, v in messages]
        )
        for fut in {id(p.future): p.future for p in placed}.values():  # one per batch
            self._track(fut)

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending:
            await asyncio.gather(*pending)


class AiokafkaPublisher(_Tracked):
    """aiokafka's producer with our settings; ``start``/``stop`` own its lifecycle.
    ``signer``: every message gets its envelope headers (Prepare, the compaction service
    and runtimes sign; the processor's own output is not read back by anyone who checks)."""

    def __init__(
        self,
        bootstrap: str,
        auth: KafkaAuth,
        *,
        signer: Signer | None = None,
        linger_ms: int = 0,
        max_batch_size: int = 1 << 20,
    ):
        super().__init__()
        self.signer = signer
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            **auth.client_kwargs(),
            acks="all",
            enable_idempotence=True,
            linger_ms=linger_ms,
            max_batch_size=max_batch_size,
            partitioner=cached_partitioner,  # Kafka's mapping, hashed once per session
        )

    async def start(self) -> None:
        await self.producer.start()

    async def stop(self) -> None:
        await self.producer.stop()

    async def send(
        self, topic: str, key: bytes | None, value: bytes, headers: KafkaHeaders | None = None
    ) -> None:
        headers = self._signed(key, value, headers)
        self._track(await self.producer.send(topic, value, key=key, headers=headers))

    async def send_many(self, messages: Sequence[Message]) -> None:
        await self._send_batches(self.producer, messages)

    async def send_and_wait(
        self, topic: str, key: bytes | None, value: bytes, headers: KafkaHeaders | None = None
    ) -> Delivery:
        headers = self._signed(key, value, headers)
        md = await self.producer.send_and_wait(topic, value, key=key, headers=headers)
        return Delivery(md.partition, md.offset)

    async def send_advisory(
        self, topic: str, key: bytes | None, value: bytes, headers: KafkaHeaders | None = None
    ) -> None:
        headers = self._signed(key, value, headers)
        fut = await self.producer.send(topic, value, key=key, headers=headers)
        fut.add_done_callback(_log_failure)


class FaustPublisher(_Tracked):
    """faust's own producer (the app sets ``producer_acks=-1``; faust starts and stops it)."""

    def __init__(self, app: Any) -> None:  # faust.App: untyped
        super().__init__()
        self.app = app

    async def _send(
        self, topic: str, key: bytes | None, value: bytes, headers: KafkaHeaders | None
    ) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = await self.app.producer.send(
            topic, key, value, partition=None, timestamp=None, headers=headers
        )
        return fut

    async def send(
        self, topic: str, key: bytes | None, value: bytes, headers: KafkaHeaders | None = None
    ) -> None:
        self._track(await self._send(topic, key, value, headers))

    async def send_many(self, messages: Sequence[Message]) -> None:
        # faust's producer has no batch interface of its own, but it sends through an
        # aiokafka producer (``_ensure_producer``, the one its ``send`` uses, with faust's
        # acks and Kafka's key mapping): batches go to that producer, in the same order.
        producer = self.app.producer._ensure_producer()
        await self._send_batches(producer, messages)

    async def send_and_wait(
        self, topic: str, key: bytes | None, value: bytes, headers: KafkaHeaders | None = None
    ) -> Delivery:
        md = await (await self._send(topic, key, value, headers))
        return Delivery(md.partition, md.offset)

    async def send_advisory(
        self, topic: str, key: bytes | None, value: bytes, headers: KafkaHeaders | None = None
    ) -> None:
        (await self._send(topic, key, value, headers)).add_done_callback(_log_failure)
