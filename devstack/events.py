"""Builders of context events for the benchmarks and the tests (the same contract types
the SDK uses)."""

from __future__ import annotations

import json
import uuid

from schemas.contracts import (
    AssistantMessagePayload,
    Authority,
    Content,
    ContextEvent,
    Payload,
    RecordKind,
    RunLifecyclePayload,
    Source,
    ToolCallSpec,
    ToolOutcomePayload,
    ToolStatus,
    UserInputPayload,
)
from services.sdk.client import RunHandle


def make(
    run: RunHandle,
    kind: RecordKind,
    authority: str,
    text: str,
    payload: Payload,
    key: str,
    operation_id: str | None = None,
) -> ContextEvent:
    return ContextEvent(
        event_id=str(uuid.uuid4()),
        event_key=key,
        scope=run.scope(),
        kind=kind,
        authority=Authority(authority),
        source=Source("test", "test-host", 1),
        content=Content.text(text),
        payload=payload,
        operation_id=operation_id,
    )


def run_started_event(run: RunHandle) -> ContextEvent:
    return make(
        run, RecordKind.RUN_STARTED, "host", "", RunLifecyclePayload(), f"run_started:{run.run_id}"
    )


def user(run: RunHandle, text: str, key: str) -> ContextEvent:
    return make(run, RecordKind.USER_INPUT, "user", text, UserInputPayload(), key)


def assistant(
    run: RunHandle,
    text: str,
    op: str,
    calls: tuple[tuple[str, str, str], ...] = (),
    authority: str = "model",
    purpose: str = "action",
) -> ContextEvent:
    payload = AssistantMessagePayload(op, purpose, tuple(ToolCallSpec(*c) for c in calls))
    return make(run, RecordKind.ASSISTANT_MESSAGE, authority, text, payload, f"model:{op}", op)


def outcome(
    run: RunHandle, call_id: str, name: str, text: str, status: ToolStatus = ToolStatus.OK
) -> ContextEvent:
    return make(
        run,
        RecordKind.TOOL_OUTCOME,
        "tool",
        text,
        ToolOutcomePayload(call_id, name, status),
        f"tool:{call_id}",
        f"tool:{call_id}",
    )


def question_round(
    run: RunHandle, tag: str, tool_statuses: tuple[ToolStatus, ...] = (ToolStatus.OK,)
) -> list[ContextEvent]:
    """A question, one assistant message calling len(tool_statuses) tools, their results,
    and a final answer: 2 model steps, 1 user turn (counted at run start)."""
    calls = tuple(
        (f"{tag}-c{i}", "read_file", json.dumps({"path": f"{tag}-{i}.txt"}))
        for i in range(len(tool_statuses))
    )
    out = [
        user(run, f"question {tag}", f"{tag}-question"),
        assistant(run, f"Reading files for {tag}.", f"{tag}-op1", calls),
    ]
    out += [
        outcome(run, c[0], c[1], f"contents of {c[0]}", st)
        for c, st in zip(calls, tool_statuses, strict=True)
    ]
    out.append(assistant(run, f"Answer for {tag}.", f"{tag}-op2"))
    return out
