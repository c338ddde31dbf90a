"""One ``ContextClient`` on a private event loop, usable from any loop or thread.

Frameworks call a session from whatever loop they run: ``Runner.run`` on the caller's,
``Runner.run_sync`` on a fresh loop in another thread, test frameworks on one loop per
test. The Kafka producer and the HTTP client are bound to the loop that started them, so
the connection keeps them on a loop of its own (a daemon thread) and every call crosses
over with ``run_coroutine_threadsafe``; the caller's loop only awaits a future.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from services.sdk.client import ContextClient

T = TypeVar("T")


class AgentLoomConnection:
    """Where the service runs, the runtime's (host) key and its space; shared by any
    number of sessions. Started on first use; ``close()`` stops it (and its sessions)."""

    def __init__(
        self,
        kafka_bootstrap: str = "127.0.0.1:19092",
        prepare_url: str = "http://127.0.0.1:18080",
        api_key: str | None = None,
        topic: str = "ctx.records",
        producer_name: str = "integration",
        space_id: str = "default",
    ) -> None:
        self._make: Callable[[], ContextClient] = lambda: ContextClient(
            kafka_bootstrap, prepare_url, topic, producer_name=producer_name, api_key=api_key
        )
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: ContextClient | None = None
        self.space_id = space_id  # the tenant space of the key: sessions are opened there
        self.releases: dict[str, str] = {}  # canonical release JSON -> release_id

    @classmethod
    def from_env(cls) -> AgentLoomConnection:
        """``ALC_KAFKA_BOOTSTRAP``, ``ALC_PREPARE_URL``, ``ALC_API_KEY``,
        ``ALC_TOPIC_RECORDS``, ``ALC_SPACE_ID`` (the defaults are ``make up``'s)."""
        env = os.environ
        return cls(
            env.get("ALC_KAFKA_BOOTSTRAP", "127.0.0.1:19092"),
            env.get("ALC_PREPARE_URL", "http://127.0.0.1:18080"),
            env.get("ALC_API_KEY"),
            env.get("ALC_TOPIC_RECORDS", "ctx.records"),
            space_id=env.get("ALC_SPACE_ID", "default"),
        )

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="agentloom-connection", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def _ensure_client(self) -> ContextClient:
        if self._client is None:
            client = self._make()
            await client.__aenter__()
            self._client = client
        return self._client

    def submit(self, fn: Callable[[ContextClient], Coroutine[Any, Any, T]]) -> Future[T]:
        """Run ``fn(client)`` on the connection's loop."""

        async def call() -> T:
            return await fn(await self._ensure_client())

        return asyncio.run_coroutine_threadsafe(call(), self._start())

    async def run(self, fn: Callable[[ContextClient], Coroutine[Any, Any, T]]) -> T:
        """Await ``fn(client)`` from any loop."""
        return await asyncio.wrap_future(self.submit(fn))

    def close(self) -> None:
        with self._lock:
            loop, thread, client = self._loop, self._thread, self._client
            self._loop = self._thread = self._client = None
        if loop is None:
            return
        if client is not None:
            asyncio.run_coroutine_threadsafe(client.__aexit__(None, None, None), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(10)
        loop.close()
