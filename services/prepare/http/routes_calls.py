"""Routes of a model call's life (R4, R6, R9, R10, R14, R15.1): prepare, the gateway's
final check and the report of the result.

A prepare is the ``prepare.answer`` span, joined to the runtime's trace by the request's
``traceparent`` when tracing is on (R18; ``streams.tracing``); a reported model call is a
GenAI span in the reporter's trace (``streams.genai``)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, Request

from domain.auth import Action, Principal
from schemas.answers.prepared import ModelCall, ModelResult, PreparedContext
from schemas.errors import ContextError
from services.metrics import PREPARE_SECONDS
from services.prepare.bodies import ModelCallIn, ModelResultIn, PrepareIn
from services.prepare.fields import PathId
from services.prepare.http.answer_json import AnswerResponse
from services.prepare.http.errors import HOOKS
from services.prepare.service import PrepareService
from streams import tracing


def call_routes(app: FastAPI, svc: PrepareService, auth: Any) -> None:
    """Prepare, model calls and their results."""
    prepare_route(app, svc, auth)
    gateway_routes(app, svc, auth)


def prepare_route(app: FastAPI, svc: PrepareService, auth: Any) -> None:
    """Prepare: the PreparedContext of one model call."""

    @app.post(
        "/v1/sessions/{session_id}/runs/{run_id}/prepare",
        response_class=AnswerResponse,
        response_model=PreparedContext,
        responses={
            200: {
                "description": "PreparedContext: messages, tools, budget report, "
                "dependency versions, block → source map (record_ids)"
            },
            **HOOKS,
        },
    )
    async def prepare(
        session_id: PathId, run_id: PathId, body: PrepareIn, request: Request, who: Principal = auth
    ) -> AnswerResponse:
        # Returned as a ready response written by orjson (``AnswerResponse``): FastAPI's
        # generic pydantic serialization of a 10k-message context cost ~3x the assembly
        # itself. ``response_model`` publishes its schema;
        # tests/unit/test_openapi_answers.py validates real answers against it.
        with tracing.server_span(tracing.PREPARE_SPAN, request.scope["headers"]) as span:
            sid = (await svc.access.authorize(session_id, who, Action.SESSION_WRITE)).session_id
            started, outcome = time.perf_counter(), "error"
            try:
                out = await svc.preparer.prepare(sid, run_id, body)
                outcome = "ok"
            except ContextError as exc:
                outcome = exc.code
                raise
            finally:
                elapsed = time.perf_counter() - started
                PREPARE_SECONDS.labels(body.purpose, outcome).observe(elapsed)
                span.set_attribute("agentloom.outcome", outcome)
            span.set_attribute("agentloom.prepared_id", out.prepared_id)
        return AnswerResponse(out)


def gateway_routes(app: FastAPI, svc: PrepareService, auth: Any) -> None:
    """The gateway's final check of a model call and the report of its result."""

    @app.post(
        "/v1/sessions/{session_id}/runs/{run_id}/model-calls",
        status_code=201,
        response_class=AnswerResponse,
        response_model=ModelCall,
        responses=HOOKS,
    )
    async def model_call(
        session_id: PathId, run_id: PathId, body: ModelCallIn, who: Principal = auth
    ) -> AnswerResponse:
        """The gateway's final check (R9.8, R10.5, R14): ``model.chat.before`` hooks, the
        protected block manifest, the same budget. 201 with the provider-ready
        ``request`` to send; 409 ``context_reprepare_required`` (once); 422
        ``context_budget_exceeded`` or ``protected_block_violation`` — nothing is sent."""
        sid = (await svc.access.authorize(session_id, who, Action.SESSION_WRITE)).session_id
        out = await svc.gateway.model_call(sid, run_id, body)
        # the provider request (as large as the prompt) is sent as rendered, not walked
        # again by a generic serializer.
        return AnswerResponse(out, status_code=201)

    @app.post("/v1/sessions/{session_id}/model-calls/{call_id}/result", responses=HOOKS)
    async def model_result(
        session_id: PathId,
        call_id: PathId,
        body: ModelResultIn,
        request: Request,
        who: Principal = auth,
    ) -> ModelResult:
        """The response and the provider's usage (R15.1): ``model.chat.after`` hooks run,
        usage calibrates later estimates and the drift is returned (R6.4). The call's
        GenAI span (R18) joins the reporter's trace."""
        sid = (await svc.access.authorize(session_id, who, Action.SESSION_WRITE)).session_id
        with tracing.joined(request.scope["headers"]):
            return await svc.gateway.model_result(sid, call_id, body)
