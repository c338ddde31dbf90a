"""HTTP API of the Prepare service (OpenAPI at ``/openapi.json``, docs at ``/docs``).

Errors are ``{"error": {"code", "message", "retriable", "details"}}`` with the status
mapped from the error class; clients branch on ``code``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, ORJSONResponse
from pydantic import BaseModel, ConfigDict, Field

from schemas.errors import ContextError, InvalidRequest
from services.prepare.service import PrepareService


class ReleaseIn(BaseModel):
    release_id: str | None = None
    agent_id: str
    instructions: str
    tool_catalog: list[dict[str, Any]] = Field(default_factory=list)
    skill_bindings: list[dict[str, Any]] = Field(default_factory=list)
    hook_bindings: list[dict[str, Any]] = Field(
        default_factory=list,
        description="hooks bound to this release (point, hook, version, ...); frozen with it",
    )
    model_profile: dict[str, Any] = Field(
        description="context_capacity (required), output_reserve, safety_margin, "
        "platform_limit, input_limit, counting, message_overhead, provider_format"
    )
    context_policy: dict[str, Any] = Field(default_factory=dict)


class SessionIn(BaseModel):
    session_id: str | None = None
    space_id: str
    actor_id: str
    release_id: str


class RunIn(BaseModel):
    run_id: str | None = None
    instance_id: str | None = None


class RunLifecycleIn(BaseModel):
    reason: str | None = None
    event_key: str | None = Field(
        None,
        description="idempotency key; by default derived from the run's lifecycle counters"
        " (a retry gets the same key, the next resume or finish a new one)",
    )
    after: dict[str, int] = Field(
        default_factory=dict,
        description="partition -> offset of the caller's last append (read-your-writes)",
    )


class FinishIn(RunLifecycleIn):
    cancelled: bool = Field(False, description="stopped by the user (run_cancelled)")


class GrantIn(BaseModel):
    actor_id: str
    granted_by: str


ACTOR = Header(
    default=None,
    alias="X-AgentLoom-Actor",
    description="The actor the caller acts for (set by the runtime after its own "
    "authentication); another actor than the session's needs a grant",
)


class PrepareIn(BaseModel):
    purpose: str = Field("action", description="action | compaction | completion (verification)")
    instance_id: str | None = None
    model_profile: dict[str, Any] | None = None
    tool_catalog: list[dict[str, Any]] | None = None
    render: bool = Field(
        False,
        description="also return the request body in the model profile's "
        "provider_format (openai_chat | openai_responses | anthropic_messages)",
    )
    after: dict[str, int] = Field(
        default_factory=dict,
        description="partition -> offset of the caller's last append (read-your-writes)",
    )
    material: list[dict[str, Any]] = Field(
        default_factory=list,
        description="retrieved passages for this call (R12.4): citation_id, version, text,"
        " source, record_id; merged by citation, kept apart when versions conflict,"
        " dropped first when over budget — never instructions",
    )
    reserve_tokens: int = Field(
        0,
        description="tokens to keep free (a re-prepare after context_reprepare_required"
        " passes the hook_tokens it was given)",
    )
    reprepare_of: str | None = Field(
        None, description="the prepared_id this re-prepares (R9.8: asked at most once)"
    )


class ModelCallIn(BaseModel):
    model_config = ConfigDict(protected_namespaces=())

    prepared_id: str
    model_config_: dict[str, Any] = Field(
        default_factory=dict,
        alias="model_config",
        description="temperature, max_tokens, … as sent (recorded, R15.1)",
    )


class ModelResultIn(BaseModel):
    response: dict[str, Any] = Field(default_factory=dict)
    usage: dict[str, Any] = Field(
        default_factory=dict, description="provider usage: input_tokens, output_tokens"
    )


def create_api(svc: PrepareService) -> FastAPI:
    app = FastAPI(
        title="AgentLoom Context — Prepare", version="0.1.0", default_response_class=ORJSONResponse
    )

    @app.exception_handler(ContextError)
    async def _context_error(_: Request, exc: ContextError) -> JSONResponse:
        return ORJSONResponse({"error": exc.to_dict()}, status_code=exc.http_status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        err = InvalidRequest("request body does not match the API", errors=exc.errors())
        return ORJSONResponse({"error": err.to_dict()}, status_code=err.http_status)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/releases", status_code=201)
    async def register_release(body: ReleaseIn) -> dict[str, Any]:
        return await svc.register_release(body.model_dump())

    @app.get("/v1/releases/{release_id}")
    async def get_release(release_id: str) -> dict[str, Any]:
        return await svc.release(release_id)

    @app.post("/v1/sessions", status_code=201)
    async def open_session(body: SessionIn) -> dict[str, Any]:
        return await svc.open_session(body.model_dump())

    @app.get("/v1/sessions/{session_id}")
    async def get_session(session_id: str) -> dict[str, Any]:
        return await svc.session(session_id)

    @app.post("/v1/sessions/{session_id}/runs", status_code=201)
    async def start_run(session_id: str, body: RunIn) -> dict[str, Any]:
        return await svc.start_run(session_id, body.model_dump())

    @app.post("/v1/sessions/{session_id}/runs/{run_id}/resume")
    async def resume_run(
        session_id: str, run_id: str, body: RunLifecycleIn, actor: str | None = ACTOR
    ) -> dict[str, Any]:
        """R1.2: continue an earlier run (same run_id, thread and snapshot) once the
        processor accepted it; 409 ``run_active`` while another run is active (R1.3)."""
        await svc.check_actor(session_id, actor)
        return await svc.resume_run(session_id, run_id, body.model_dump())

    @app.post("/v1/sessions/{session_id}/runs/{run_id}/finish")
    async def finish_run(
        session_id: str, run_id: str, body: FinishIn, actor: str | None = ACTOR
    ) -> dict[str, Any]:
        """Finish (or cancel) the run once the processor accepted it; 409
        ``run_not_active`` when it already ended otherwise. Appends to an ended run are
        dead-lettered (``run_not_active``) until it is resumed."""
        await svc.check_actor(session_id, actor)
        return await svc.finish_run(session_id, run_id, body.model_dump())

    @app.post(
        "/v1/sessions/{session_id}/runs/{run_id}/prepare",
        response_class=ORJSONResponse,
        responses={
            200: {
                "description": "PreparedContext: messages, tools, budget report, "
                "dependency versions, block → source map (record_ids)"
            }
        },
    )
    async def prepare(
        session_id: str, run_id: str, body: PrepareIn, actor: str | None = ACTOR
    ) -> ORJSONResponse:
        # Returned as a ready response: FastAPI's generic pydantic serialization of a
        # 10k-message dict cost ~3x the assembly itself.
        await svc.check_actor(session_id, actor)
        return ORJSONResponse(await svc.prepare(session_id, run_id, body.model_dump()))

    @app.post("/v1/sessions/{session_id}/runs/{run_id}/model-calls", status_code=201)
    async def model_call(
        session_id: str, run_id: str, body: ModelCallIn, actor: str | None = ACTOR
    ) -> ORJSONResponse:
        """The gateway's final check (R9.8, R10.5, R14): ``model.chat.before`` hooks, the
        protected block manifest, the same budget. 201 with the provider-ready
        ``request`` to send; 409 ``context_reprepare_required`` (once); 422
        ``context_budget_exceeded`` or ``protected_block_violation`` — nothing is sent."""
        await svc.check_actor(session_id, actor)
        out = await svc.model_call(
            session_id,
            run_id,
            {"prepared_id": body.prepared_id, "model_config": body.model_config_},
        )
        return ORJSONResponse(out, status_code=201)

    @app.post("/v1/sessions/{session_id}/model-calls/{call_id}/result")
    async def model_result(
        session_id: str, call_id: str, body: ModelResultIn, actor: str | None = ACTOR
    ) -> dict[str, Any]:
        """The response and the provider's usage (R15.1): ``model.chat.after`` hooks run,
        usage calibrates later estimates and the drift is returned (R6.4)."""
        await svc.check_actor(session_id, actor)
        return await svc.model_result(session_id, call_id, body.model_dump())

    @app.get("/v1/sessions/{session_id}/records/{record_id}")
    async def read_record(
        session_id: str,
        record_id: str,
        offset: int = 0,
        limit: int = 65536,
        run_id: str | None = None,
        instance_id: str | None = None,
        actor: str | None = ACTOR,
    ) -> dict[str, Any]:
        """Read a source record back by id, paged. With ``run_id`` + ``instance_id`` the
        read is made on behalf of that thread and scope-checked (a child thread reads
        only its own records and its transfer: ``not_granted`` otherwise)."""
        await svc.check_actor(session_id, actor)
        return await svc.read_record(session_id, record_id, offset, limit, run_id, instance_id)

    @app.post("/v1/sessions/{session_id}/grants", status_code=201)
    async def grant(session_id: str, body: GrantIn) -> dict[str, Any]:
        return await svc.grant(session_id, body.model_dump())

    @app.put("/v1/blobs")
    async def put_blob(request: Request) -> dict[str, Any]:
        media = request.headers.get("content-type", "text/plain")
        return await svc.put_blob(await request.body(), media)

    @app.get("/v1/sessions/{session_id}/events/{event_key}")
    async def event_outcome(session_id: str, event_key: str) -> dict[str, Any]:
        return await svc.outcome(session_id, event_key)

    return app
