"""Python contract types mirroring ``schemas/avro/context_event.avsc``.

Frozen dataclasses with an explicit wire mapping (``to_avro``/``from_avro``) next to
them. ``tests/unit/test_contracts.py`` proves field names and optionality agree with the
Avro schema, so the two cannot drift apart silently.
"""

from __future__ import annotations

import hashlib
import typing
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Union

from schemas.mapping import _from_wire, _to_wire, avro_field_names, built, to_wire

NAMESPACE = "agentloom.context.v1"


class RecordKind(StrEnum):
    USER_INPUT = "user_input"
    ASSISTANT_MESSAGE = "assistant_message"
    TOOL_CALL = "tool_call"
    TOOL_OUTCOME = "tool_outcome"
    RESOURCE_ACTIVATION = "resource_activation"
    CHILD_RESULT = "child_result"
    RUN_STARTED = "run_started"
    RUN_RESUMED = "run_resumed"
    SUPPLEMENT = "supplement"
    RUN_CANCELLED = "run_cancelled"
    RUN_FINISHED = "run_finished"
    # Withdraws an earlier record from every view (the record stays readable
    # by id). Last, like its Avro symbol, so earlier encodings keep their bytes.
    RECORD_RETRACTED = "record_retracted"
    # the execution frontier (R4.4, R11.5): a thread's whole current plan, and
    # a user constraint declared or retired. State of record, rendered as blocks of their
    # own; in the thread's history they show nothing.
    PLAN_UPDATED = "plan_updated"
    CONSTRAINT_SET = "constraint_set"
    CONSTRAINT_RETIRED = "constraint_retired"
    # Authored records: a decision and an open question (and its closing), recorded
    # explicitly by the model (tools) or the host (SDK). Unlike the frontier they stay in
    # the thread's history, and every summary keeps them verbatim, cited.
    DECISION_RECORDED = "decision_recorded"
    QUESTION_OPENED = "question_opened"
    QUESTION_CLOSED = "question_closed"


class Authority(StrEnum):
    SYSTEM = "system"
    DEVELOPER = "developer"
    USER = "user"
    MODEL = "model"
    TOOL = "tool"
    HOST = "host"


class Visibility(StrEnum):
    SESSION = "session"
    ACTOR = "actor"
    INSTANCE = "instance"
    PRIVATE = "private"


class ToolStatus(StrEnum):
    OK = "ok"
    ERROR = "error"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Scope:
    space_id: str
    actor_id: str
    session_id: str
    run_id: str | None = None
    instance_id: str | None = None


@dataclass(frozen=True)
class Source:
    producer: str
    host_id: str
    occurred_at_ms: int
    resource_version: str | None = None


@dataclass(frozen=True)
class Content:
    sha256: str
    length: int
    inline: str | None = None
    ref: str | None = None
    media_type: str = "text/plain"

    @staticmethod
    def text(value: str, media_type: str = "text/plain") -> Content:
        raw = value.encode("utf-8")
        return Content(
            sha256=hashlib.sha256(raw).hexdigest(),
            length=len(raw),
            inline=value,
            media_type=media_type,
        )

    @staticmethod
    def reference(sha256: str, length: int, media_type: str = "text/plain") -> Content:
        return Content(sha256=sha256, length=length, ref=sha256, media_type=media_type)


@dataclass(frozen=True)
class UserInputPayload:
    AVRO_NAME: ClassVar[str] = "UserInputPayload"
    intent: str = "question"


@dataclass(frozen=True)
class ToolCallSpec:
    call_id: str
    name: str
    arguments_json: str


@dataclass(frozen=True)
class AssistantMessagePayload:
    AVRO_NAME: ClassVar[str] = "AssistantMessagePayload"
    model_operation_id: str
    purpose: str = "action"
    tool_calls: tuple[ToolCallSpec, ...] = ()
    finish_reason: str = "stop"
    usage_input_tokens: int | None = None
    usage_output_tokens: int | None = None


@dataclass(frozen=True)
class ToolCallPayload:
    AVRO_NAME: ClassVar[str] = "ToolCallPayload"
    call_id: str
    name: str
    arguments_json: str
    tool_kind: str = "function"
    server: str | None = None


@dataclass(frozen=True)
class SkillRef:
    name: str
    revision: str
    content_hash: str


@dataclass(frozen=True)
class ToolOutcomePayload:
    AVRO_NAME: ClassVar[str] = "ToolOutcomePayload"
    call_id: str
    name: str
    status: ToolStatus
    error_code: str | None = None
    tool_kind: str = "function"
    server: str | None = None
    view_ref: str | None = None
    skill: SkillRef | None = None


@dataclass(frozen=True)
class ResourceActivationPayload:
    AVRO_NAME: ClassVar[str] = "ResourceActivationPayload"
    resource_kind: str
    resource_id: str
    version: str
    content_hash: str
    active: bool = True


@dataclass(frozen=True)
class ChildResultPayload:
    AVRO_NAME: ClassVar[str] = "ChildResultPayload"
    child_instance_id: str
    child_operation_id: str
    outcome: str
    conclusion: str
    source_revision: int
    evidence_refs: tuple[str, ...] = ()
    artifact_refs: tuple[str, ...] = ()
    unresolved_items: tuple[str, ...] = ()
    exported_context_refs: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunLifecyclePayload:
    AVRO_NAME: ClassVar[str] = "RunLifecyclePayload"
    reason: str | None = None
    release_id: str | None = None


@dataclass(frozen=True)
class RetractionPayload:
    """``target_record_id`` leaves every view from now on; its source stays
    readable by id, marked retracted. The event's ``operation_id`` is the target id, so
    a record is retracted at most once (R3.1: scope + operation_id + kind)."""

    AVRO_NAME: ClassVar[str] = "RetractionPayload"
    target_record_id: str
    reason: str | None = None


class PlanStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    DONE = "done"
    BLOCKED = "blocked"
    DROPPED = "dropped"


@dataclass(frozen=True)
class PlanItem:
    item_id: str
    text: str
    status: str  # a PlanStatus value (validated at ingest)
    note: str | None = None


@dataclass(frozen=True)
class PlanPayload:
    """The whole current plan of a thread, in order (R4.4). Each accepted update
    is its thread's next plan version; a child thread has a plan of its own (R13.1)."""

    AVRO_NAME: ClassVar[str] = "PlanPayload"
    items: tuple[PlanItem, ...] = ()
    explanation: str | None = None


@dataclass(frozen=True)
class ConstraintPayload:
    """A user constraint (``constraint_set``: its text is the event's content) or
    its retirement (``constraint_retired``). ``constraint_id`` is its identity: setting it
    again is a new version of the same constraint, never a second one."""

    AVRO_NAME: ClassVar[str] = "ConstraintPayload"
    constraint_id: str
    scope: str = "session"  # session | run
    source_record_id: str | None = None


@dataclass(frozen=True)
class DecisionPayload:
    """A decision (``decision_recorded``: its text is the event's content) and why."""

    AVRO_NAME: ClassVar[str] = "DecisionPayload"
    reason: str | None = None


@dataclass(frozen=True)
class QuestionPayload:
    """An open question (``question_opened``: its text is the content, ``question_key``
    the event's own key) or its closing (``question_closed``: ``question_key`` names the
    opened question's event key, with the answer if there is one)."""

    AVRO_NAME: ClassVar[str] = "QuestionPayload"
    question_key: str
    answer: str | None = None


Payload = Union[  # noqa: UP007 - a runtime object used for the union's branches
    UserInputPayload,
    AssistantMessagePayload,
    ToolCallPayload,
    ToolOutcomePayload,
    ResourceActivationPayload,
    ChildResultPayload,
    RunLifecyclePayload,
    RetractionPayload,
    PlanPayload,
    ConstraintPayload,
    DecisionPayload,
    QuestionPayload,
]
PAYLOAD_TYPES: tuple[type, ...] = typing.get_args(Payload)
_PAYLOAD_BY_NAME: dict[str, type] = {
    f"{NAMESPACE}.{t.__dict__['AVRO_NAME']}": t for t in PAYLOAD_TYPES
}

# Which payload each kind carries: a mismatch is a contract violation (dead letter).
PAYLOAD_FOR_KIND: dict[RecordKind, type] = {
    RecordKind.USER_INPUT: UserInputPayload,
    RecordKind.SUPPLEMENT: UserInputPayload,
    RecordKind.ASSISTANT_MESSAGE: AssistantMessagePayload,
    RecordKind.TOOL_CALL: ToolCallPayload,
    RecordKind.TOOL_OUTCOME: ToolOutcomePayload,
    RecordKind.RESOURCE_ACTIVATION: ResourceActivationPayload,
    RecordKind.CHILD_RESULT: ChildResultPayload,
    RecordKind.RUN_STARTED: RunLifecyclePayload,
    RecordKind.RUN_RESUMED: RunLifecyclePayload,
    RecordKind.RUN_CANCELLED: RunLifecyclePayload,
    RecordKind.RUN_FINISHED: RunLifecyclePayload,
    RecordKind.RECORD_RETRACTED: RetractionPayload,
    RecordKind.PLAN_UPDATED: PlanPayload,
    RecordKind.CONSTRAINT_SET: ConstraintPayload,
    RecordKind.CONSTRAINT_RETIRED: ConstraintPayload,
    RecordKind.DECISION_RECORDED: DecisionPayload,
    RecordKind.QUESTION_OPENED: QuestionPayload,
    RecordKind.QUESTION_CLOSED: QuestionPayload,
}


@dataclass(frozen=True)
class ContextEvent:
    event_id: str
    event_key: str
    scope: Scope
    kind: RecordKind
    authority: Authority
    source: Source
    content: Content
    payload: Payload
    visibility: Visibility = Visibility.SESSION
    expected_revision: int | None = None
    operation_id: str | None = None

    def to_avro(self) -> dict[str, Any]:
        out: dict[str, Any] = _to_wire(self)
        # Name the union branch explicitly: several payload records share field shapes.
        out["payload"] = (f"{NAMESPACE}.{type(self.payload).AVRO_NAME}", _to_wire(self.payload))
        return out

    @staticmethod
    def from_avro(data: dict[str, Any]) -> ContextEvent:
        # Spelled out for the envelope (every event passes here on the ingest hot path);
        # payloads use the generic converters. Field names are pinned by the contract test
        # (the Avro record's fields are the dataclass's), so the decoded dicts are complete.
        name, body = data["payload"]
        return built(
            ContextEvent,
            {
                "event_id": data["event_id"],
                "event_key": data["event_key"],
                "scope": built(Scope, data["scope"]),
                "kind": _KINDS[data["kind"]],
                "authority": _AUTHORITIES[data["authority"]],
                "source": built(Source, data["source"]),
                "content": built(Content, data["content"]),
                "payload": _from_wire(_PAYLOAD_BY_NAME[name], body),
                "visibility": _VISIBILITIES[data["visibility"]],
                "expected_revision": data["expected_revision"],
                "operation_id": data["operation_id"],
            },
        )


_KINDS = {str(k): k for k in RecordKind}
_AUTHORITIES = {str(a): a for a in Authority}
_VISIBILITIES = {str(v): v for v in Visibility}


__all__ = [
    "PAYLOAD_FOR_KIND",
    "PAYLOAD_TYPES",
    "AssistantMessagePayload",
    "Authority",
    "ChildResultPayload",
    "ConstraintPayload",
    "Content",
    "ContextEvent",
    "DecisionPayload",
    "Payload",
    "PlanItem",
    "PlanPayload",
    "PlanStatus",
    "QuestionPayload",
    "RecordKind",
    "ResourceActivationPayload",
    "RetractionPayload",
    "RunLifecyclePayload",
    "Scope",
    "SkillRef",
    "Source",
    "ToolCallPayload",
    "ToolCallSpec",
    "ToolOutcomePayload",
    "ToolStatus",
    "UserInputPayload",
    "Visibility",
    "avro_field_names",
    "built",
    "field",
    "to_wire",
]
