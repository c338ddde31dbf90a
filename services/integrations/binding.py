"""What the framework adapters share: one conversation of theirs bound to one session of
ours on an ``AgentLoomConnection`` — the release registered once per connection, the
session opened lazily under one lock on the connection's loop, the active run resumed
after a restart, a run finished without failing when it already ended."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from services.integrations.connection import AgentLoomConnection
from services.sdk.client import ApiError, ContextClient, RunHandle


class ConversationBinding:
    """Mixin: call ``_bind`` from ``__init__``; override ``_open`` to find or open the
    session (it sets ``_session`` and, for a restarted process, ``_run``)."""

    session_id: str
    _conn: AgentLoomConnection
    _owns_connection: bool
    _release_id: str | None
    _release: dict[str, Any]
    _space_id: str
    _actor_id: str
    _lock: asyncio.Lock | None
    _session: dict[str, Any] | None
    _run: RunHandle | None

    def _bind(
        self,
        session_id: str,
        connection: AgentLoomConnection | None,
        release_id: str | None,
        release: dict[str, Any],
        space_id: str | None,
        actor_id: str,
    ) -> None:
        self.session_id = session_id
        self._owns_connection = connection is None
        self._conn = connection or AgentLoomConnection.from_env()
        self._release_id = release_id
        self._release = release
        self._space_id, self._actor_id = space_id or self._conn.space_id, actor_id
        # Loop-side state (touched only on the connection's loop, under _lock).
        self._lock = None
        self._session = None
        self._run = None

    def close(self) -> None:
        """Closes the connection if this adapter made it."""
        if self._owns_connection:
            self._conn.close()

    async def _open(self, c: ContextClient) -> None:
        raise NotImplementedError

    async def _locked(self, c: ContextClient, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._session is None:
                await self._open(c)
            return await fn(c, *args)

    async def _registered_release(self, c: ContextClient) -> str:
        """The release id: given, or ``_release`` registered once per connection."""
        if self._release_id is None:
            canon = json.dumps(self._release, sort_keys=True)
            if canon not in self._conn.releases:
                release = await c.register_release(**self._release)
                self._conn.releases[canon] = release["release_id"]
            self._release_id = self._conn.releases[canon]
        return self._release_id

    @staticmethod
    def _active_run(session: dict[str, Any]) -> RunHandle | None:
        """The session's active run (a process restarted mid-run goes on with it)."""
        run_id = session.get("active_run_id")
        if not run_id:
            return None
        return RunHandle(
            session["session_id"],
            run_id,
            f"{run_id}.main",
            session["space_id"],
            session["actor_id"],
            {},
        )

    async def _finish_run(self, c: ContextClient) -> None:
        """Finish the current run; one that already ended is not an error."""
        if self._run is None:
            return
        try:
            await c.finish_run(self._run)
        except ApiError as exc:
            if exc.code != "run_not_active":
                raise
        self._run = None
