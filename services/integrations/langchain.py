"""``AgentLoomMiddleware``: LangChain v1 ``create_agent`` middleware (langchain 1.5) over
AgentLoom Context. Switch by replacing ``SummarizationMiddleware(...)`` with
``AgentLoomMiddleware("conv-1")``; compaction, baselines and the hard budget are ours.

Around every model call (``wrap_model_call`` / ``awrap_model_call``):

1. the request's messages not yet recorded become our events (``langchain_messages``):
   a human message after the run's answer starts a new run (one run per question), an
   AI message is one model result with its calls, a tool message the outcome of its call;
   keys come from the message ids, so a retried call records nothing twice;
2. the request's messages are replaced by the prepared context of the run — the committed
   summary plus the uncovered records, within the release's budget, checked by our model
   gateway (``prepare(render=True)`` then the final check); tool groups are whole by
   construction. The release's instructions are left out: the agent sends its own;
3. the model's answer is recorded and reported with its usage (``usage_metadata``).

The plan (R4.4): an AI message calling LangChain's ``write_todos``
(``TodoListMiddleware``) or our ``update_plan`` (``domain.plan_tool.PLAN_TOOL``) is also
published as the thread's plan (key ``plan:<tool_call_id>``: a retry is no second
version; todo ids from a hash of their text, see ``binding.plan_of_call``), so the plan
renders as its own block in every prepared context without code of the agent's.

Decisions and open questions (issue 36): with ``record_tools=True`` the middleware offers
the model ``record_decision``, ``open_question`` and ``close_question``
(``authored_tools``); an AI message calling them is published as the model's decision or
question (``authored_tools.publish_authored``), kept verbatim and cited in every summary.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool

from domain import responses_items as ri
from domain.context.providers import render
from schemas.contracts import ToolStatus
from services.integrations import authored_tools as at
from services.integrations import langchain_messages as lm
from services.integrations.binding import ConversationBinding, publish_plans
from services.integrations.connection import AgentLoomConnection
from services.sdk.client import ApiError, ContextClient, RunHandle

DEFAULT_RELEASE: dict[str, Any] = {
    "agent_id": "langchain-agent",
    "instructions": "Instructions come from the agent (LangChain create_agent).",
    "tool_catalog": [],
    "model_profile": {
        "name": "openai-chat-128k",
        "context_capacity": 128000,
        "output_reserve": 8000,
        "safety_margin": 2000,
        "provider_format": "openai_chat",
    },
}

Handler = Callable[[ModelRequest[Any]], ModelResponse[Any]]
AsyncHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]


class AgentLoomMiddleware(AgentMiddleware[Any, Any, Any], ConversationBinding):
    """One conversation of a LangChain agent, kept by AgentLoom Context.

    ``session_id``: ours (one per conversation); ``connection``: where the service runs
    (default ``AgentLoomConnection.from_env()``); ``release_id`` or ``release`` (registered
    once): the agent release whose model profile and context policy apply.
    """

    def __init__(
        self,
        session_id: str,
        *,
        connection: AgentLoomConnection | None = None,
        release_id: str | None = None,
        release: dict[str, Any] | None = None,
        space_id: str | None = None,
        actor_id: str = "langchain-user",
        record_tools: bool = False,
    ) -> None:
        """``record_tools``: offer the model the decision and question tools."""
        super().__init__()
        self.tools = authored_tools() if record_tools else []
        self._bind(
            session_id, connection, release_id, release or DEFAULT_RELEASE, space_id, actor_id
        )
        self._answered = False  # the current run has model output: a human message is new
        self._asked = False  # the current run has its question: more user text supplements it
        self._seen: set[str] = set()  # ids of the messages recorded
        self._tool_names: dict[str, str] = {}

    # --- the middleware hooks -----------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest[Any], handler: Handler) -> ModelResponse[Any]:
        prepared = self._conn.submit(lambda c: self._locked(c, self._before, request)).result()
        response = handler(request.override(messages=prepared[0]))
        self._conn.submit(lambda c: self._locked(c, self._after, prepared[1], response)).result()
        return response

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: AsyncHandler
    ) -> ModelResponse[Any]:
        prepared = await self._conn.run(lambda c: self._locked(c, self._before, request))
        response = await handler(request.override(messages=prepared[0]))
        await self._conn.run(lambda c: self._locked(c, self._after, prepared[1], response))
        return response

    # --- on the connection's loop -------------------------------------------------------

    async def _open(self, c: ContextClient) -> None:
        release_id = await self._registered_release(c)
        try:
            self._session = await c._call("GET", f"/v1/sessions/{self.session_id}")
        except ApiError as exc:
            if exc.code != "not_found":
                raise
            self._session = await c.open_session(
                self._space_id, self._actor_id, release_id, self.session_id
            )
        self._run = self._active_run(self._session)
        if self._run is not None:
            self._answered = self._asked = True

    async def _before(
        self, c: ContextClient, request: ModelRequest[Any]
    ) -> tuple[list[BaseMessage], str | None]:
        for message in lm.new_messages(request.messages, self._seen):
            await self._record(c, message)
        if self._run is None:  # nothing asked yet: the request goes as it is
            return list(request.messages), None
        prepared = await c.prepare(self._run, render=True)
        call = await self._check(c, prepared)
        chat = call["request"].get("messages") if call else None
        if chat is None:  # a profile in another format: rendered here in openai_chat
            chat = render(prepared["messages"], [], "openai_chat")["messages"]
        instructions = {
            str(m.get("content")) for m in prepared["messages"] if m.get("block") == "instruction"
        }
        return lm.to_messages(chat, instructions), (call or {}).get("call_id")

    async def _check(self, c: ContextClient, prepared: dict[str, Any]) -> dict[str, Any] | None:
        """The gateway's final check (hooks, manifest, budget); asked to prepare again,
        it does so once with the hooks' tokens reserved (as ``ContextClient.call_model``)."""
        assert self._run is not None
        try:
            return await c.check_model_call(self._run, prepared)
        except ApiError as exc:
            if exc.code != "context_reprepare_required":
                raise
            hook_tokens = int(exc.details.get("hook_tokens") or 0)
        again = await c.prepare(
            self._run,
            render=True,
            reserve_tokens=hook_tokens,
            reprepare_of=prepared["prepared_id"],
        )
        return await c.check_model_call(self._run, again)

    async def _after(
        self, c: ContextClient, call_id: str | None, response: ModelResponse[Any]
    ) -> None:
        for message in response.result:
            if isinstance(message, AIMessage):
                # add_messages keeps an id it is given: the one our key is made from.
                message.id = message.id or f"lc-{uuid.uuid4().hex}"
                await self._record(c, message)
                if call_id is not None and self._run is not None:
                    answer, usage = lm.response_of(message)
                    await c.report_model_result(self._run, call_id, answer, usage)

    async def _record(self, c: ContextClient, message: BaseMessage) -> None:
        op = lm.to_op(message)
        if op is None:
            return
        if isinstance(op, ri.UserOp) and (self._run is None or self._answered):
            await self._new_run(c)
        run = self._run or await self._new_run(c)
        if isinstance(op, ri.UserOp):
            key = lm.message_key("u:", self.session_id, message, op)
            await c.append_user(run, op.text, key, supplement=self._asked or op.role != "user")
            self._asked = True
        elif isinstance(op, ri.ModelOp):
            op_id = lm.message_key("m:", self.session_id, message, op)
            await c.append_model_result(run, op.text, op_id, list(op.calls))
            await publish_plans(c, run, op.calls)
            await at.publish_authored(c, run, op.calls)
            self._tool_names |= {call_id: name for call_id, name, _ in op.calls}
            self._answered = True
        else:
            name = getattr(message, "name", None) or self._tool_names.get(op.call_id, "function")
            status = ToolStatus.OK if op.status == "ok" else ToolStatus.ERROR
            await c.append_tool_outcome(run, op.call_id, name, op.output, status)
        if message.id:
            self._seen.add(message.id)

    async def _new_run(self, c: ContextClient) -> RunHandle:
        assert self._session is not None
        await self._finish_run(c)
        self._run = await c.start_run(self._session)
        self._answered = self._asked = False
        return self._run


def authored_tools() -> list[BaseTool]:
    """``record_decision``, ``open_question`` and ``close_question`` as LangChain tools
    (``authored_tools.TOOLS``): they answer the model; the middleware publishes the call."""

    def record_decision(
        decision: str, tool_call_id: Annotated[str, InjectedToolCallId], reason: str = ""
    ) -> str:
        args = {"decision": decision, "reason": reason or None}
        return at.tool_answer(at.RECORD_DECISION, _json(args), tool_call_id)

    def open_question(question: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        return at.tool_answer(at.OPEN_QUESTION, _json({"question": question}), tool_call_id)

    def close_question(
        question_key: str, tool_call_id: Annotated[str, InjectedToolCallId], answer: str = ""
    ) -> str:
        args = {"question_key": question_key, "answer": answer or None}
        return at.tool_answer(at.CLOSE_QUESTION, _json(args), tool_call_id)

    return [
        StructuredTool.from_function(func=f, name=name, description=at.TOOLS[name]["description"])
        for name, f in (
            (at.RECORD_DECISION, record_decision),
            (at.OPEN_QUESTION, open_question),
            (at.CLOSE_QUESTION, close_question),
        )
    ]


def _json(args: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in args.items() if v is not None})
