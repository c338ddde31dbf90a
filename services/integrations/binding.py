"""What the framework adapters share: one conversation of theirs bound to one session of
ours on an ``AgentLoomConnection`` — the release registered once per connection, the
session opened lazily under one lock on the connection's loop, the active run resumed
after a restart, a run finished without failing when it already ended; a plan tool call
the model makes (our ``update_plan`` or LangChain's ``write_todos``) published as the
thread's plan (R4.4)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from domain.plan_tool import PLAN_TOOL_NAME, plan_from_tool_arguments, plan_items
from schemas.contracts import PlanItem
from schemas.errors import InvalidEvent, InvalidRequest
from services.integrations.connection import AgentLoomConnection
from services.sdk.client import ApiError, ContextClient, RunHandle

WRITE_TODOS = "write_todos"  # LangChain's TodoListMiddleware tool
PLAN_TOOLS = frozenset({PLAN_TOOL_NAME, WRITE_TODOS})
log = logging.getLogger(__name__)


def plan_of_call(name: str, arguments: str) -> tuple[tuple[PlanItem, ...], str | None] | None:
    """The plan (and explanation) a plan tool call states; ``None`` for another tool.
    Raises ``InvalidRequest`` for arguments that are not a plan.

    ``write_todos`` (``{"todos": [{"content", "status"}]}``) carries no ids: a todo's id is
    ``todo-`` and a hash of its text (a repeated text gets ``-2``, ``-3``…), so a step
    keeps its id when steps are added, dropped or reordered around it and its status
    changes; an edited text is a new step. ``update_plan`` items without an id are
    numbered by position (``plan_items``)."""
    if name == PLAN_TOOL_NAME:
        return plan_from_tool_arguments(arguments)
    if name != WRITE_TODOS:
        return None
    try:
        args = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise InvalidRequest("write_todos arguments are not JSON", field="arguments") from exc
    todos = args.get("todos") if isinstance(args, dict) else None
    if not isinstance(todos, list) or not all(isinstance(t, dict) for t in todos):
        raise InvalidRequest("write_todos needs todos: a list of items", field="todos")
    counts: dict[str, int] = {}
    items = []
    for todo in todos:
        text = str(todo.get("content") or "")
        digest = hashlib.sha256(text.strip().encode()).hexdigest()[:10]
        counts[digest] = counts.get(digest, 0) + 1
        n = counts[digest]
        item_id = f"todo-{digest}" if n == 1 else f"todo-{digest}-{n}"
        items.append({"id": item_id, "content": text, "status": todo.get("status")})
    return plan_items(items), None


async def publish_plans(
    c: ContextClient, run: RunHandle, calls: Iterable[tuple[str, str, str]]
) -> None:
    """Publish the plan of every plan tool call among ``calls`` ((call id, name,
    arguments)) with the key ``plan:<call id>``: a retried append is no second version.
    A call whose arguments are not a plan is skipped (logged): the model's result is
    recorded all the same, and the tool's own answer tells the model."""
    for call_id, name, arguments in calls:
        if name not in PLAN_TOOLS:
            continue
        try:
            plan = plan_of_call(name, arguments)
        except (InvalidRequest, InvalidEvent) as exc:
            log.warning("plan tool call %s not published: %s", call_id, exc)
            continue
        if plan is not None:
            items, explanation = plan
            await c.update_plan(run, list(items), f"plan:{call_id}", explanation)


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
