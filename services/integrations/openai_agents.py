"""``AgentLoomSession``: the OpenAI Agents SDK's ``Session`` protocol (openai-agents
0.24) over AgentLoom Context. Switch by replacing ``SQLiteSession("conv-1")`` with
``AgentLoomSession("conv-1")``; compaction, baselines and the hard budget are ours.

- ``add_items`` appends the items as our events (``responses_items.to_ops``): a user
  message after the run's answer starts a new run (the previous one is finished) — one
  run per question; keys come from content and position, so a retried ``add_items`` is
  a duplicate, not a second record; call ids are kept.
- ``get_items`` answers with the prepared context of the current run — the committed
  summary plus the uncovered items, within the release's budget — as Responses input
  items (``prepare(render=True)`` in ``openai_responses``). The release's instructions
  are left out: the Agent sends its own.
- ``pop_item`` records a retraction (``record_retracted``) of the newest item of
  the view — the last conversation record of the current generation — waits until the
  processor committed it and returns that item; None when there is none. The record
  leaves every view (and what compaction summarizes) and stays readable by id, marked
  retracted. A record is one item except a model response with function calls: it is
  retracted whole (the item returned is its last). An item a committed summary covers is
  refused (``retraction_of_summarized_record``): the summary would still restate it.
- ``clear_session`` finishes the run and moves the SDK's session id to a fresh session of
  ours (``<id>.<n>``); the old one stays readable by id. That is recorded too (the run's
  finish, the new session), and it is not a retraction of everything: a summary cannot
  un-summarize, while a new generation starts an empty view whatever was compacted.
- the plan tool (R4.4): give the agent ``plan_tool()``; when ``add_items``
  stores a ``function_call`` of ``update_plan`` (or LangChain's ``write_todos``), the
  session publishes it as the thread's plan (``ContextClient.update_plan``, key
  ``plan:<call_id>``: a retried batch is no second version) and the plan renders as its
  own block in every prepared context. The tool itself only confirms.
- decisions and open questions (issue 36): give the agent ``authored_tools()``
  (``record_decision``, ``open_question``, ``close_question``); the session publishes
  their calls as the model's records (``authored_tools.publish_authored``), kept
  verbatim and cited in every summary.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents import FunctionTool
from agents.memory.session import SessionABC
from agents.memory.session_settings import SessionSettings, resolve_session_limit
from agents.tool_context import ToolContext

from domain import responses_items as ri
from domain.context.providers import render
from domain.plan_tool import PLAN_TOOL, plan_from_tool_arguments
from schemas.contracts import Authority, Content, RecordKind, RetractionPayload, ToolStatus
from schemas.errors import InvalidRequest
from services.integrations import authored_tools as at
from services.integrations.binding import ConversationBinding, publish_plans
from services.integrations.connection import AgentLoomConnection
from services.sdk.client import ApiError, ContextClient, RunHandle

DEFAULT_RELEASE: dict[str, Any] = {
    "agent_id": "openai-agents",
    "instructions": "Instructions come from the agent (OpenAI Agents SDK).",
    "tool_catalog": [],
    "model_profile": {
        "name": "openai-responses-128k",
        "context_capacity": 128000,
        "output_reserve": 8000,
        "safety_margin": 2000,
        "provider_format": "openai_responses",
    },
}
COMMIT_WAIT_S = 30.0  # how long pop_item waits for its retraction to be committed


class AgentLoomSession(SessionABC, ConversationBinding):
    """A conversation of the OpenAI Agents SDK, kept by AgentLoom Context.

    ``connection``: where the service runs (default ``AgentLoomConnection.from_env()``,
    closed with the session); ``release_id`` or ``release`` (registered once): the agent
    release whose model profile and context policy apply; ``actor_id``: whose session.
    """

    def __init__(
        self,
        session_id: str,
        *,
        connection: AgentLoomConnection | None = None,
        release_id: str | None = None,
        release: dict[str, Any] | None = None,
        space_id: str | None = None,
        actor_id: str = "agents-sdk-user",
        session_settings: SessionSettings | None = None,
    ) -> None:
        self._bind(
            session_id, connection, release_id, release or DEFAULT_RELEASE, space_id, actor_id
        )
        self.session_settings = session_settings or SessionSettings()
        self._answered = False  # the current run has model output: a user message is new
        self._ordinal = 0  # items appended in the current run (keys)
        self._tool_names: dict[str, str] = {}
        self._partial: tuple[str, int] | None = None  # (batch key, ops appended)

    # --- the Session protocol -----------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[Any]:
        n = resolve_session_limit(limit, self.session_settings)
        items = await self._conn.run(lambda c: self._locked(c, self._get_items))
        return ri.last(items, n)

    async def add_items(self, items: list[Any]) -> None:
        batch = [dict(i) for i in items]
        if batch:
            await self._conn.run(lambda c: self._locked(c, self._add, batch))

    async def pop_item(self) -> Any:
        return await self._conn.run(lambda c: self._locked(c, self._pop))

    async def clear_session(self) -> None:
        await self._conn.run(lambda c: self._locked(c, self._clear))

    # --- on the connection's loop -------------------------------------------------------

    async def _open(self, c: ContextClient) -> None:
        """The SDK session's current generation: the last of ``<id>``, ``<id>.1``, … that
        exists (``clear_session`` made the later ones); its active run, if any."""
        release_id = await self._registered_release(c)
        gen, current = 0, None
        while True:
            try:
                current = await c._call("GET", f"/v1/sessions/{self._generation_id(gen)}")
            except ApiError as exc:
                if exc.code != "not_found":
                    raise
                break
            gen += 1
        sid = self._generation_id(max(gen - 1, 0))
        if current is None:
            current = await c.open_session(self._space_id, self._actor_id, release_id, sid)
        self._session = current
        self._run = self._active_run(current)
        if self._run is not None:
            self._answered, self._ordinal = True, int(current.get("last_sequence") or 0)

    def _generation_id(self, gen: int) -> str:
        return self.session_id if gen == 0 else f"{self.session_id}.{gen}"

    async def _new_run(self, c: ContextClient) -> RunHandle:
        assert self._session is not None
        await self._finish_run(c)
        self._run = await c.start_run(self._session)
        self._answered, self._ordinal = False, 0
        return self._run

    async def _add(self, c: ContextClient, items: list[ri.Item]) -> None:
        ops = ri.to_ops(items)
        batch = ri.op_key("b:", self.session_id, 0, ri.UserOp(repr(ops)))
        # A retry of a batch that failed part-way skips what was appended (the SDK retries
        # a failed write with the same items); what failed is repeated at the same
        # position, so its key matches if it had in fact reached the broker.
        done = self._partial[1] if self._partial and self._partial[0] == batch else 0
        self._partial = None
        for i, op in enumerate(ops):
            if i < done:
                continue
            try:
                await self._append(c, op)
            except BaseException:
                self._partial = (batch, i)
                raise

    async def _append(self, c: ContextClient, op: ri.Op) -> None:
        if isinstance(op, ri.UserOp) and (self._run is None or self._answered):
            await self._new_run(c)
        run = self._run or await self._new_run(c)
        ordinal = self._ordinal
        if isinstance(op, ri.UserOp):
            question = op.role == "user" and ordinal == 0
            key = ri.op_key("u:", run.run_id, ordinal, op)
            await c.append_user(run, op.text, key, supplement=not question)
        elif isinstance(op, ri.ModelOp):
            op_id = ri.op_key("m:", run.run_id, ordinal, op)
            await c.append_model_result(run, op.text, op_id, list(op.calls))
            await publish_plans(c, run, op.calls)
            await at.publish_authored(c, run, op.calls)
            self._tool_names |= {call_id: name for call_id, name, _ in op.calls}
            self._answered = True
        else:
            name = self._tool_names.get(op.call_id, "function")
            status = ToolStatus.OK if op.status == "ok" else ToolStatus.ERROR
            await c.append_tool_outcome(run, op.call_id, name, op.output, status)
        self._ordinal = ordinal + 1

    async def _get_items(self, c: ContextClient) -> list[ri.Item]:
        if self._run is None:
            return []
        prepared = await c.prepare(self._run, render=True)
        provider = prepared.get("provider") or {}
        if provider.get("format") == "openai_responses":
            rendered = provider["request"]["input"]
        else:
            rendered = render(prepared["messages"], [], "openai_responses")["input"]
        return ri.to_items(rendered)

    async def _pop(self, c: ContextClient) -> ri.Item | None:
        if self._run is None:
            return None
        prepared = await c.prepare(self._run, render=True)
        newest = _newest_item(prepared["messages"])
        if newest is None:
            return None
        message, record_id = newest
        # One key per target: a retried pop (or a second process popping the same item)
        # is a duplicate, never a second retraction.
        key = f"retract:{record_id}"
        await c.append(
            c._event(
                self._run,
                RecordKind.RECORD_RETRACTED,
                Authority.HOST,  # the runtime, on behalf of its user
                Content.text(""),
                RetractionPayload(record_id, "pop_item"),
                key,
                operation_id=record_id,  # a record is retracted once (R3.1)
            )
        )
        await wait_committed(c, self._run.session_id, key)
        return ri.to_items(render([message], [], "openai_responses")["input"])[-1]

    async def _clear(self, c: ContextClient) -> None:
        await self._finish_run(c)
        assert self._session is not None and self._release_id is not None
        # the generation is in the session's name (ids are per space: the
        # global ``session_id`` is server-assigned when another space has the name).
        sid = str(self._session.get("session_name") or self._session["session_id"])
        gen = int(sid.rsplit(".", 1)[1]) + 1 if sid != self.session_id else 1
        self._session = await c.open_session(
            self._space_id, self._actor_id, self._release_id, self._generation_id(gen)
        )
        self._answered, self._ordinal, self._tool_names = False, 0, {}


def plan_tool() -> FunctionTool:
    """The ``update_plan`` tool (``domain.plan_tool.PLAN_TOOL``) for an Agent whose
    session is an ``AgentLoomSession``: the session publishes the plan when it stores the
    call; the tool answers the model with a short confirmation (or what is wrong)."""

    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        try:
            items, _ = plan_from_tool_arguments(arguments)
        except InvalidRequest as exc:
            return f"plan not updated: {exc}"
        return f"Plan updated ({len(items)} steps). It is shown to you in every call."

    return FunctionTool(
        name=str(PLAN_TOOL["name"]),
        description=str(PLAN_TOOL["description"]),
        params_json_schema=PLAN_TOOL["parameters"],
        on_invoke_tool=invoke,
        strict_json_schema=False,  # id and note are optional
    )


def authored_tools() -> list[FunctionTool]:
    """``record_decision``, ``open_question`` and ``close_question``
    (``authored_tools.TOOLS``) for an Agent whose session is an ``AgentLoomSession``: the
    session publishes the records when it stores the calls; the tools answer the model."""

    def tool(name: str) -> FunctionTool:
        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            return at.tool_answer(name, arguments, ctx.tool_call_id)

        spec = at.TOOLS[name]
        return FunctionTool(
            name=name,
            description=str(spec["description"]),
            params_json_schema=spec["parameters"],
            on_invoke_tool=invoke,
            strict_json_schema=False,  # reason and answer are optional
        )

    return [tool(at.RECORD_DECISION), tool(at.OPEN_QUESTION), tool(at.CLOSE_QUESTION)]


def _newest_item(messages: list[dict[str, Any]]) -> tuple[dict[str, Any], str] | None:
    """The view's newest conversation message (what was said or done, not a summary, a
    state note or the instructions) and the record it shows."""
    for m in reversed(messages):
        if m.get("block") == "interaction" and m.get("record_ids"):
            return m, str(m["record_ids"][0])
    return None


async def wait_committed(c: ContextClient, session_id: str, event_key: str) -> None:
    """Wait until the processor decided ``event_key``: committed returns, refused raises
    ``ApiError`` with the processor's code (e.g. ``retraction_of_summarized_record``)."""
    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + COMMIT_WAIT_S, 0.005
    while True:
        o = await c._call("GET", f"/v1/sessions/{session_id}/events/{event_key}")
        if o.get("outcome") == "committed":
            return
        if o.get("outcome") in ("rejected", "dead_letter"):
            raise ApiError.of(409, str(o.get("code")), str(o.get("message")), False)
        if loop.time() > deadline:
            raise ApiError.of(0, "timeout", f"{event_key} not committed in time", True)
        await asyncio.sleep(delay)  # the processor commits within a batch interval
        delay = min(delay * 2, 0.2)
