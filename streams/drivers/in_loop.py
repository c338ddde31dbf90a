"""faust-streaming's aiokafka consumer on the app's own event loop, without its thread.

faust runs its aiokafka consumer in a thread with an event loop of its own
(``ThreadDelegateConsumer``): every fetch, commit and position query is a method queued
to that thread and a future resolved back across threads, the two threads passing the
GIL back and forth (``strace``: ~2,500 ``futex`` calls a second at 48 agents). Here the
same consumer thread class serves on the app's loop: its methods are awaited where they
are called, and its service runs as a task of that loop (at 4 agents the processor's
CPU a step 0.86x, docs/scaling.md). Fetching, committing, rebalancing (the listener's
callbacks run in faust's method queue on the app's loop, as they do for the threaded
consumer) are faust's and aiokafka's own code, unchanged.
``ALC_PROCESSOR_CONSUMER_THREAD=true`` restores faust's thread.

On the app's loop the consumer can also be told to stop fetching while the faust process
applies a batch (``paused_while``): faust's reader hands the stream every fetch at once
and aiokafka fetches again as soon as one returns, so under load each append's produce
request came back as a fetch of its own, and batches were cut that small. Paused,
what arrives meanwhile waits in the broker and comes in one fetch once the batch is
applied, the next batch (``ALC_PROCESSOR_PAUSE_FETCHING``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.utils.futures import maybe_async

Method = Callable[..., Awaitable[Any]]
Handler = Callable[[list[Any]], Awaitable[object]]


class InLoopConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """``AIOKafkaConsumerThread`` served by a task of the app's loop, not a thread."""

    _serving: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """``_serve`` (start, then wait until stopped, then shut down) as a task; returns
        once the consumer started or raises what stopped it from starting."""
        assert not self._thread_started.is_set()
        self._thread_started.set()
        running: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._thread_running = running
        self._serving = asyncio.ensure_future(self._serve())
        try:
            await running
        finally:
            self._thread_running = None

    async def _gather_remaining_tasks(self) -> None:
        """Nothing to sweep: the thread's version cancels every task of its loop, which
        here is the app's. aiokafka's consumer stops its own tasks in ``stop``."""

    async def call_thread(self, fun: Method, *args: Any, **kwargs: Any) -> Any:
        return await maybe_async(fun(*args, **kwargs))

    def pause_fetching(self) -> None:
        """No fetch for the assigned partitions until ``resume_fetching``. aiokafka keeps
        their positions: records a fetch in flight brings meanwhile are not handed out,
        and are fetched again once resumed."""
        consumer = self._consumer
        if consumer is not None and (assigned := consumer.assignment()):
            consumer.pause(*assigned)

    def resume_fetching(self) -> None:
        """Fetch again what ``pause_fetching`` paused and is still assigned (a rebalance
        meanwhile starts its new assignment unpaused)."""
        consumer = self._consumer
        if consumer is not None and (paused := consumer.paused() & consumer.assignment()):
            consumer.resume(*paused)


class InLoopConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> InLoopConsumerThread:
        loop = self.loop
        return InLoopConsumerThread(self, loop=loop, thread_loop=loop, beacon=self.beacon)

    @property
    def consumer_thread(self) -> InLoopConsumerThread:
        thread = self._thread
        assert isinstance(thread, InLoopConsumerThread)
        return thread


class InLoopTransport(faust_aiokafka.Transport):
    Consumer = InLoopConsumer


def paused_while(app: faust.App, apply: Handler) -> Handler:
    """``apply`` with ``app``'s consumer fetching nothing until it returns; ``apply``
    itself when the consumer is not on the app's loop (its thread's state is not this
    loop's to change)."""
    consumer = app.consumer
    if not isinstance(consumer, InLoopConsumer):
        return apply
    thread = consumer.consumer_thread

    async def paused(batch: list[Any]) -> object:
        thread.pause_fetching()
        try:
            return await apply(batch)
        finally:
            thread.resume_fetching()

    return paused


def consume_in_loop(app: faust.App) -> None:
    """Make ``app`` consume on its own loop (before its topics or agents use the
    transport: it is created once, lazily)."""
    app.transport = InLoopTransport(app.conf.broker_consumer, app)
