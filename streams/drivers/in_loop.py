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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.utils.futures import maybe_async

Method = Callable[..., Awaitable[Any]]


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


class InLoopConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> InLoopConsumerThread:
        loop = self.loop
        return InLoopConsumerThread(self, loop=loop, thread_loop=loop, beacon=self.beacon)


class InLoopTransport(faust_aiokafka.Transport):
    Consumer = InLoopConsumer


def consume_in_loop(app: faust.App) -> None:
    """Make ``app`` consume on its own loop (before its topics or agents use the
    transport: it is created once, lazily)."""
    app.transport = InLoopTransport(app.conf.broker_consumer, app)
