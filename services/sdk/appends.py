"""Appends (R16): the runtime's events, published over Kafka by the SDK.

Every append takes an ``event_key`` (idempotency: retrying the same append never makes a
second record) and returns the (partition, offset) it was written at. Content over
``INLINE_LIMIT`` goes to the content store first (R3.4), over HTTP.

Each append is an ``sdk.append`` span (R18) whose context travels in the
message's headers, so the processor's commit of the event joins the runtime's trace.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import SpanKind

from domain.frontier import constraint_id_for
from domain.plan_tool import PlanItemLike, plan_items
from domain.planning.state import record_id_for
from schemas.contracts import (
    AssistantMessagePayload,
    Authority,
    ChildResultPayload,
    ConstraintPayload,
    Content,
    ContextEvent,
    Payload,
    PlanPayload,
    RecordKind,
    ResourceActivationPayload,
    Scope,
    SkillRef,
    Source,
    ToolCallSpec,
    ToolOutcomePayload,
    ToolStatus,
    UserInputPayload,
)
from services.bus import EventBus
from services.sdk.http import Params
from services.sdk.key_check import BusKeyCheck
from streams import tracing

INLINE_LIMIT = 64 * 1024  # larger content goes to the content store first (R3.4)


@dataclass(frozen=True)
class RunHandle:
    session_id: str
    run_id: str
    instance_id: str
    space_id: str
    actor_id: str
    snapshot: dict[str, Any]

    def scope(self) -> Scope:
        return Scope(self.space_id, self.actor_id, self.session_id, self.run_id, self.instance_id)


@dataclass(frozen=True)
class SessionTarget:
    """A session outside any run: where a session constraint may be declared between
    runs. ``ContextClient.set_constraint`` takes one, or a session as returned by
    ``open_session``."""

    space_id: str
    actor_id: str
    session_id: str

    def scope(self) -> Scope:
        return Scope(self.space_id, self.actor_id, self.session_id)


Target = RunHandle | SessionTarget


def _target(where: RunHandle | SessionTarget | Mapping[str, Any]) -> Target:
    if isinstance(where, RunHandle | SessionTarget):
        return where
    return SessionTarget(str(where["space_id"]), str(where["actor_id"]), str(where["session_id"]))


class EventAppends:
    """The append half of ``ContextClient``: builds events and publishes them."""

    producer: EventBus
    producer_name: str
    host_id: str
    key_check: BusKeyCheck

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
        raise NotImplementedError  # ContextClient's HTTP call (content store uploads)

    async def _content(self, text: str, media_type: str = "text/plain") -> Content:
        raw = text.encode("utf-8")
        if len(raw) <= INLINE_LIMIT:
            return Content.text(text, media_type)
        blob = await self._call(
            "PUT", "/v1/blobs", content=raw, headers={"content-type": media_type}
        )
        return Content.reference(blob["sha256"], blob["length"], media_type)

    def _event(
        self,
        run: Target,
        kind: RecordKind,
        authority: Authority,
        content: Content,
        payload: Payload,
        event_key: str,
        operation_id: str | None = None,
        expected_revision: int | None = None,
    ) -> ContextEvent:
        return ContextEvent(
            event_id=str(uuid.uuid4()),
            event_key=event_key,
            scope=run.scope(),
            kind=kind,
            authority=authority,
            source=Source(self.producer_name, self.host_id, int(time.time() * 1000)),
            content=content,
            payload=payload,
            operation_id=operation_id,
            expected_revision=expected_revision,
        )

    async def append(self, event: ContextEvent) -> tuple[int, int]:
        """Publish ``event``; raises ``ApiError`` ``bus_key_refused`` once the bus is known
        to refuse this client's appends (``services.sdk.key_check``)."""
        await self.key_check.before_append()
        with tracing.tracer().start_as_current_span(
            tracing.APPEND_SPAN, kind=SpanKind.PRODUCER
        ) as span:
            if span.is_recording():  # the attributes only when someone keeps them
                span.set_attributes(
                    {
                        "agentloom.session_id": event.scope.session_id,
                        "agentloom.run_id": event.scope.run_id or "",
                        "agentloom.event_kind": event.kind.value,
                        "agentloom.event_key": event.event_key,
                    }
                )
            partition, offset = await self.producer.send(event)
            self.key_check.sent(event.scope.session_id, event.event_key, partition, offset)
            span.set_attribute("messaging.destination.partition.id", str(partition))
            span.set_attribute("messaging.kafka.offset", offset)
            return partition, offset

    async def append_user(
        self,
        run: RunHandle,
        text: str,
        event_key: str,
        supplement: bool = False,
        constraint: bool | str = False,
    ) -> tuple[int, int]:
        """``constraint``: the input is also a user constraint — ``True`` for
        one identified by its text, or the constraint's id; it holds for the session."""
        kind = RecordKind.SUPPLEMENT if supplement else RecordKind.USER_INPUT
        payload = UserInputPayload("supplement" if supplement else "question")
        at = await self.append(
            self._event(run, kind, Authority.USER, await self._content(text), payload, event_key)
        )
        if constraint is False:
            return at
        source = record_id_for(run.space_id, run.session_id, event_key)
        return await self.set_constraint(
            run,
            text,
            constraint_id=None if constraint is True else constraint,
            source_record_id=source,
            event_key=f"constraint:{event_key}",
        )

    async def update_plan(
        self,
        run: RunHandle,
        items: Sequence[PlanItemLike],
        event_key: str | None = None,
        explanation: str | None = None,
        authority: Authority = Authority.MODEL,
    ) -> tuple[int, int]:
        """The whole current plan of ``run``'s thread (R4.4; a child's is its
        own). Pass ``event_key`` (e.g. the plan tool call's id) to make retries no-ops;
        each accepted update is the thread's next plan version."""
        parsed = plan_items(items)
        text = "\n".join(f"[{i.status}] {i.text}" for i in parsed) or "(empty plan)"
        return await self.append(
            self._event(
                run,
                RecordKind.PLAN_UPDATED,
                authority,
                await self._content(text),
                PlanPayload(parsed, explanation),
                event_key or f"plan:{uuid.uuid4().hex}",
            )
        )

    async def set_constraint(
        self,
        run: RunHandle | SessionTarget | Mapping[str, Any],
        text: str,
        constraint_id: str | None = None,
        scope: str = "session",
        source_record_id: str | None = None,
        event_key: str | None = None,
        authority: Authority = Authority.USER,
    ) -> tuple[int, int]:
        """A user constraint, rendered verbatim in every action context until
        retired (``scope`` ``run``: until the run ends). Without ``constraint_id`` its
        identity is its normalized text: setting it again is its next version, shown once.
        ``run`` may be a session (``open_session``'s answer): declared between runs."""
        cid = constraint_id or constraint_id_for(text)
        return await self.append(
            self._event(
                _target(run),
                RecordKind.CONSTRAINT_SET,
                authority,
                Content.text(text),
                ConstraintPayload(cid, scope, source_record_id),
                event_key or f"constraint:{cid}:{uuid.uuid4().hex}",
            )
        )

    async def retire_constraint(
        self,
        run: RunHandle | SessionTarget | Mapping[str, Any],
        constraint_id: str,
        event_key: str | None = None,
    ) -> tuple[int, int]:
        """The constraint never renders again (until it is set anew)."""
        return await self.append(
            self._event(
                _target(run),
                RecordKind.CONSTRAINT_RETIRED,
                Authority.USER,
                Content.text(""),
                ConstraintPayload(constraint_id),
                event_key or f"retire:{constraint_id}:{uuid.uuid4().hex}",
            )
        )

    async def append_model_result(
        self,
        run: RunHandle,
        text: str,
        model_operation_id: str,
        tool_calls: list[tuple[str, str, str]] | None = None,
        purpose: str = "action",
        expected_revision: int | None = None,
    ) -> tuple[int, int]:
        calls = tuple(ToolCallSpec(c, n, a) for c, n, a in (tool_calls or []))
        payload = AssistantMessagePayload(
            model_operation_id, purpose, calls, "tool_calls" if calls else "stop"
        )
        return await self.append(
            self._event(
                run,
                RecordKind.ASSISTANT_MESSAGE,
                Authority.MODEL,
                await self._content(text),
                payload,
                f"model:{model_operation_id}",
                model_operation_id,
                expected_revision,
            )
        )

    async def append_tool_outcome(
        self,
        run: RunHandle,
        call_id: str,
        name: str,
        result: str,
        status: ToolStatus = ToolStatus.OK,
        tool_kind: str = "function",
        server: str | None = None,
        error_code: str | None = None,
        skill: SkillRef | None = None,
        resource_ref: str | None = None,
    ) -> tuple[int, int]:
        """``resource_ref``: the resource this result derives from (``id`` or
        ``id@version``, e.g. a document); revoking it withdraws the result (R15.3)."""
        payload = ToolOutcomePayload(
            call_id, name, status, error_code, tool_kind, server, skill=skill
        )
        ev = self._event(
            run,
            RecordKind.TOOL_OUTCOME,
            Authority.TOOL,
            await self._content(result),
            payload,
            f"tool:{call_id}",
            f"tool:{call_id}",
        )
        if resource_ref:
            ev = dataclasses.replace(
                ev, source=dataclasses.replace(ev.source, resource_version=resource_ref)
            )
        return await self.append(ev)

    async def revoke_resource(
        self, run: RunHandle, kind: str, resource_id: str, version: str
    ) -> tuple[int, int]:
        """R11.8/R15.3: the resource is no longer authorized — its content leaves every
        view and summaries derived from it are invalidated and rebuilt from sources."""
        payload = ResourceActivationPayload(kind, resource_id, version, "", active=False)
        return await self.append(
            self._event(
                run,
                RecordKind.RESOURCE_ACTIVATION,
                Authority.HOST,
                Content.text(""),
                payload,
                f"revoke:{kind}:{resource_id}:{version}",
            )
        )

    async def activate_resource(
        self, run: RunHandle, kind: str, resource_id: str, version: str, body: str
    ) -> tuple[int, int]:
        digest = hashlib.sha256(body.encode()).hexdigest()
        payload = ResourceActivationPayload(kind, resource_id, version, digest)
        return await self.append(
            self._event(
                run,
                RecordKind.RESOURCE_ACTIVATION,
                Authority.HOST,
                Content.text(""),
                payload,
                f"activate:{kind}:{resource_id}:{version}:{run.run_id}",
            )
        )

    async def accept_child_result(
        self, run: RunHandle, result: ChildResultPayload, text: str
    ) -> tuple[int, int]:
        return await self.append(
            self._event(
                run,
                RecordKind.CHILD_RESULT,
                Authority.HOST,
                await self._content(text),
                result,
                f"child:{result.child_operation_id}",
                f"child:{result.child_operation_id}",
            )
        )
