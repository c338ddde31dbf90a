"""Runtime SDK (R16). Appends go over Kafka (idempotent producer, acks=all); run start,
resume and finish, prepare and content upload go over HTTP to the Prepare service.

Every append takes an ``event_key`` (idempotency: retrying the same append never makes a
second record) and returns the (partition, offset) it was written at; ``prepare`` passes
the latest of these so the answer includes every append made before it.

HTTP calls carry the current trace context (``traceparent``); ``prepare`` is an
``sdk.prepare`` span, so Prepare's answer joins the runtime's trace (R18).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from opentelemetry.trace import SpanKind

from schemas.contracts import (
    Authority,
    Content,
    RecordKind,
    ResourceActivationPayload,
)
from schemas.errors import ApiError
from services.bus import EventBus
from services.sdk.appends import INLINE_LIMIT, RunHandle
from services.sdk.authored import AuthoredAppends
from services.sdk.http import Params, http_calls, json_body
from services.sdk.key_check import BusKeyCheck
from streams import tracing
from streams.kafka.auth import KafkaAuth

__all__ = ["INLINE_LIMIT", "ApiError", "ContextClient", "RunHandle"]


class ContextClient(AuthoredAppends):
    def __init__(
        self,
        kafka_bootstrap: str,
        prepare_url: str,
        topic: str = "ctx.records",
        producer_name: str = "runtime",
        host_id: str = "local",
        api_key: str | None = None,
        http_transport: httpx.AsyncBaseTransport | None = None,
        kafka_auth: KafkaAuth | None = None,
    ) -> None:
        """``api_key``: this runtime's API key (``agentloom-keys create``), by default from
        ``ALC_API_KEY``; sent as ``Authorization: Bearer`` on every HTTP call, and the
        key every append is signed with (docs/security.md). Appends go over Kafka as the
        ``kafka_auth`` principal (default: ``ALC_KAFKA_*``, else the local stack's
        ``runtime``). ``http_transport``: another way to reach Prepare (an in-process
        app, in tests)."""
        key = api_key if api_key is not None else os.environ.get("ALC_API_KEY")
        self.producer = EventBus(kafka_bootstrap, topic, key, kafka_auth)
        headers = {"Authorization": f"Bearer {key}"} if key else None
        self.http = http_calls(prepare_url, headers, http_transport)
        self.producer_name = producer_name
        self.host_id = host_id
        self.key_check = BusKeyCheck(self._event_outcome)

    async def __aenter__(self) -> ContextClient:
        await self.producer.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.producer.stop()
        await self.http.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        params: Params | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One HTTP call; anything but a JSON object with a 2xx raises ``ApiError``.
        ``json``: a body written as JSON; ``content``: raw bytes (their type in ``headers``)."""
        what = f"{method} {path}"
        sent = dict(headers or {})
        if json is not None:
            content = json_body(json)
            sent["content-type"] = "application/json"
        sent |= tracing.http_headers()  # inside a span: the server's span joins this trace
        r = await self.http.request(method, path, body=content, params=params, headers=sent)
        try:
            body = orjson.loads(r.body)
        except ValueError:  # not JSON (or not UTF-8): a proxy's page, a crash text
            body = None
        if r.status >= 400:
            if not isinstance(body, dict):
                body = {"error": {"code": f"http_{r.status}", "message": r.text[:500]}}
            raise ApiError(r.status, body)
        if not isinstance(body, dict):
            raise ApiError.of(
                r.status, "bad_response", f"{what}: not a JSON object: {r.text[:200]!r}", False
            )
        return body

    async def _event_outcome(
        self, session_id: str, event_key: str, partition: int, offset: int
    ) -> dict[str, Any]:
        """What the processor decided for an append written at ``partition:offset``."""
        path = f"/v1/sessions/{quote(session_id, safe='')}/events/{quote(event_key, safe='')}"
        return await self._call("GET", path, params={"partition": partition, "offset": offset})

    # --- releases and sessions ----------------------------------------------------------

    async def register_release(self, **release: Any) -> dict[str, Any]:
        return await self._call("POST", "/v1/releases", json=release)

    async def open_session(
        self, space_id: str, actor_id: str, release_id: str, session_id: str | None = None
    ) -> dict[str, Any]:
        opened = await self._call(
            "POST",
            "/v1/sessions",
            json={
                "space_id": space_id,
                "actor_id": actor_id,
                "release_id": release_id,
                "session_id": session_id,
            },
        )
        self.key_check.seen(str(opened.get("session_id")))
        return opened

    async def start_run(self, session: dict[str, Any], run_id: str | None = None) -> RunHandle:
        """A new question ⇒ a new run (R1.1); refused with ``run_active`` (R1.3)."""
        r = await self._call(
            "POST", f"/v1/sessions/{session['session_id']}/runs", json={"run_id": run_id}
        )
        self.key_check.seen(session["session_id"])
        return RunHandle(
            session["session_id"],
            r["run_id"],
            r["instance_id"],
            session["space_id"],
            session["actor_id"],
            r["snapshot"],
        )

    async def resume_run(
        self, run: RunHandle, reason: str | None = None, event_key: str | None = None
    ) -> tuple[int, int]:
        """R1.2/R2.5: continue an earlier run in its own thread, with its own snapshot.
        Returns once the processor accepted it; raises ApiError ``run_active`` while
        another run is active (R1.3). The key comes from the run's durable lifecycle
        counters (the server's): a retry — also from a restarted runtime — is a
        duplicate, the next resume after another finish is new. ``event_key`` pins it."""
        return await self._lifecycle(run, "resume", {"reason": reason, "event_key": event_key})

    async def finish_run(
        self,
        run: RunHandle,
        cancelled: bool = False,
        reason: str | None = None,
        event_key: str | None = None,
    ) -> tuple[int, int]:
        """End the run (``cancelled``: stopped by the user). Returns once the processor
        accepted it (a retry is a duplicate, answered alike); raises ApiError
        ``run_not_active`` when the run already ended otherwise."""
        body = {"cancelled": cancelled, "reason": reason, "event_key": event_key}
        return await self._lifecycle(run, "finish", body)

    async def _lifecycle(
        self, run: RunHandle, action: str, body: dict[str, Any]
    ) -> tuple[int, int]:
        r = await self._call(
            "POST",
            f"/v1/sessions/{run.session_id}/runs/{run.run_id}/{action}",
            json=body | {"after": self.producer.after(run.session_id)},
        )
        self.key_check.seen(run.session_id)
        return int(r["partition"]), int(r["offset"])

    async def read_record(
        self,
        session_id: str,
        record_id: str,
        offset: int = 0,
        limit: int = 65536,
        as_thread: RunHandle | None = None,
        actor: str | None = None,
    ) -> dict[str, Any]:
        """``actor``: the actor this read is made for; another actor than the session's
        needs a grant (``not_granted``)."""
        params: dict[str, Any] = {"offset": offset, "limit": limit}
        if as_thread is not None:
            params |= {"run_id": as_thread.run_id, "instance_id": as_thread.instance_id}
        headers = {"X-AgentLoom-Actor": actor} if actor else None
        return await self._call(
            "GET", f"/v1/sessions/{session_id}/records/{record_id}", params=params, headers=headers
        )

    async def grant(
        self, session_id: str, actor_id: str, actor: str | None = None
    ) -> dict[str, Any]:
        """Let ``actor_id`` read the session. Only its owner grants: a user key of the
        owner, or a host key acting as itself or for ``actor`` (the owner). Who granted
        is recorded from the key, never sent."""
        headers = {"X-AgentLoom-Actor": actor} if actor else None
        return await self._call(
            "POST",
            f"/v1/sessions/{session_id}/grants",
            json={"actor_id": actor_id},
            headers=headers,
        )

    async def revoke_grant(
        self, session_id: str, actor_id: str, actor: str | None = None
    ) -> dict[str, Any]:
        """Take ``actor_id``'s grant back: who may grant may revoke (see ``grant``).
        Idempotent; ``revoked`` says whether there was a grant. Every Prepare instance
        refuses the actor within its key cache's TTL (10 s)."""
        headers = {"X-AgentLoom-Actor": actor} if actor else None
        path = f"/v1/sessions/{session_id}/grants/{quote(actor_id, safe='')}"
        return await self._call("DELETE", path, headers=headers)

    async def export_for_child(
        self, run: RunHandle, child_instance_id: str, background_record_ids: list[str]
    ) -> RunHandle:
        """R13.2: open a child thread of ``run`` that sees only the chosen background
        (as material, not a grant) and its own records. Returns the child's handle."""
        child = RunHandle(
            run.session_id, run.run_id, child_instance_id, run.space_id, run.actor_id, run.snapshot
        )
        body = json.dumps(list(background_record_ids))
        digest = hashlib.sha256(body.encode()).hexdigest()
        await self.append(
            self._event(
                child,
                RecordKind.RESOURCE_ACTIVATION,
                Authority.HOST,
                Content.text(body),
                ResourceActivationPayload("child_transfer", child_instance_id, "1", digest),
                f"child_transfer:{child_instance_id}",
            )
        )
        return child

    # --- prepare --------------------------------------------------------------------------

    async def prepare(
        self,
        run: RunHandle,
        purpose: str = "action",
        tool_catalog: list[dict[str, Any]] | None = None,
        model_profile: dict[str, Any] | None = None,
        render: bool = False,
        material: list[dict[str, Any]] | None = None,
        reserve_tokens: int = 0,
        reprepare_of: str | None = None,
    ) -> dict[str, Any]:
        """``material``: retrieved passages for this call (citation_id, version, text,
        source) — reference material, merged by citation (R12.4). Raises ``ApiError``
        ``bus_key_refused`` instead of answering when the bus refused this client's
        appends (``services.sdk.key_check``)."""
        with tracing.tracer().start_as_current_span(
            tracing.PREPARE_CLIENT_SPAN,
            kind=SpanKind.CLIENT,
            attributes={"agentloom.session_id": run.session_id, "agentloom.purpose": purpose},
        ):
            prepared = await self._call(
                "POST",
                f"/v1/sessions/{run.session_id}/runs/{run.run_id}/prepare",
                json={
                    "purpose": purpose,
                    "instance_id": run.instance_id,
                    "tool_catalog": tool_catalog,
                    "model_profile": model_profile,
                    "render": render,
                    "material": material or [],
                    "reserve_tokens": reserve_tokens,
                    "reprepare_of": reprepare_of,
                    "after": self.producer.after(run.session_id),
                },
            )
        # Prepare waited for this client's appends: what became of them is final now.
        await self.key_check.after_prepare()
        return prepared

    # --- model gateway (R9.8, R10.5, R14, R15.1) ----------------------------------------

    async def check_model_call(
        self, run: RunHandle, prepared: dict[str, Any], model_config: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The gateway's final check of a prepared context: model.chat.before hooks, the
        protected manifest, the budget. Returns ``request`` (provider-ready) and
        ``call_id``; raises ApiError ``context_reprepare_required`` /
        ``context_budget_exceeded`` / ``protected_block_violation`` (nothing to send)."""
        return await self._call(
            "POST",
            f"/v1/sessions/{run.session_id}/runs/{run.run_id}/model-calls",
            json={"prepared_id": prepared["prepared_id"], "model_config": model_config or {}},
        )

    async def report_model_result(
        self,
        run: RunHandle,
        call_id: str,
        response: dict[str, Any],
        usage: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The response and the provider's usage (input_tokens, output_tokens): recorded
        with the call, and the estimate's drift is returned (R6.4, R15.1)."""
        return await self._call(
            "POST",
            f"/v1/sessions/{run.session_id}/model-calls/{call_id}/result",
            json={"response": response, "usage": usage or {}},
        )

    async def call_model(
        self,
        run: RunHandle,
        send: Callable[[dict[str, Any]], Awaitable[tuple[dict[str, Any], dict[str, Any]]]],
        model_config: dict[str, Any] | None = None,
        **prepare_kw: Any,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Prepare → final check → ``send(request)`` → report. ``send`` calls the provider
        with the provider-ready request and returns (response, usage). On
        ``context_reprepare_required`` it prepares again once, with the hooks' tokens
        reserved; the gateway never asks twice (R9.8). Returns (response, call record)."""
        prepared = await self.prepare(run, **prepare_kw)
        try:
            call = await self.check_model_call(run, prepared, model_config)
        except ApiError as exc:
            if exc.code != "context_reprepare_required":
                raise
            prepared = await self.prepare(
                run,
                **prepare_kw,
                reserve_tokens=int(exc.details.get("hook_tokens") or 0),
                reprepare_of=prepared["prepared_id"],
            )
            call = await self.check_model_call(run, prepared, model_config)
        response, usage = await send(call["request"])
        record = await self.report_model_result(run, call["call_id"], response, usage)
        return response, record | {"call_id": call["call_id"], "prepared": prepared}

    async def read_content(
        self, run: RunHandle, ref: str, offset: int = 0, limit: int = 8000
    ) -> dict[str, Any]:
        """Execute the model's ``read_content`` tool call (R10.3): a paged read-back of an
        externalized result, scope-checked for this thread."""
        kind, _, ident = ref.partition(":")
        if kind != "rec" or not ident:
            raise ValueError(f"unknown content reference {ref!r}; expected rec:<record_id>")
        return await self.read_record(run.session_id, ident, offset, limit, as_thread=run)
