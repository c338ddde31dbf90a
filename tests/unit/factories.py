"""Builders and hypothesis strategies shared by the unit tests (no I/O)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from schemas.contracts import (
    PAYLOAD_FOR_KIND,
    AssistantMessagePayload,
    Authority,
    ChildResultPayload,
    ConstraintPayload,
    Content,
    ContextEvent,
    DecisionPayload,
    PlanItem,
    PlanPayload,
    QuestionPayload,
    RecordKind,
    ResourceActivationPayload,
    RetractionPayload,
    RunLifecyclePayload,
    Scope,
    SkillRef,
    Source,
    ToolCallPayload,
    ToolCallSpec,
    ToolOutcomePayload,
    ToolStatus,
    UserInputPayload,
    Visibility,
)

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TEXT = st.text(max_size=40)
OPT_TEXT = st.none() | TEXT
OPT_LONG = st.none() | INT64
STR_TUPLE = st.lists(TEXT, max_size=3).map(tuple)

tool_call_specs = st.builds(ToolCallSpec, call_id=TEXT, name=TEXT, arguments_json=TEXT)
skill_refs = st.builds(SkillRef, name=TEXT, revision=TEXT, content_hash=TEXT)

PAYLOAD_STRATEGIES: dict[type, st.SearchStrategy[Any]] = {
    UserInputPayload: st.builds(UserInputPayload, intent=TEXT),
    AssistantMessagePayload: st.builds(
        AssistantMessagePayload,
        model_operation_id=TEXT,
        purpose=TEXT,
        tool_calls=st.lists(tool_call_specs, max_size=3).map(tuple),
        finish_reason=TEXT,
        usage_input_tokens=OPT_LONG,
        usage_output_tokens=OPT_LONG,
    ),
    ToolCallPayload: st.builds(
        ToolCallPayload,
        call_id=TEXT,
        name=TEXT,
        arguments_json=TEXT,
        tool_kind=TEXT,
        server=OPT_TEXT,
    ),
    ToolOutcomePayload: st.builds(
        ToolOutcomePayload,
        call_id=TEXT,
        name=TEXT,
        status=st.sampled_from(ToolStatus),
        error_code=OPT_TEXT,
        tool_kind=TEXT,
        server=OPT_TEXT,
        view_ref=OPT_TEXT,
        skill=st.none() | skill_refs,
    ),
    ResourceActivationPayload: st.builds(
        ResourceActivationPayload,
        resource_kind=TEXT,
        resource_id=TEXT,
        version=TEXT,
        content_hash=TEXT,
        active=st.booleans(),
    ),
    ChildResultPayload: st.builds(
        ChildResultPayload,
        child_instance_id=TEXT,
        child_operation_id=TEXT,
        outcome=TEXT,
        conclusion=TEXT,
        source_revision=INT64,
        evidence_refs=STR_TUPLE,
        artifact_refs=STR_TUPLE,
        unresolved_items=STR_TUPLE,
        exported_context_refs=STR_TUPLE,
    ),
    RunLifecyclePayload: st.builds(RunLifecyclePayload, reason=OPT_TEXT, release_id=OPT_TEXT),
    RetractionPayload: st.builds(RetractionPayload, target_record_id=TEXT, reason=OPT_TEXT),
    PlanPayload: st.builds(
        PlanPayload,
        items=st.lists(
            st.builds(PlanItem, item_id=TEXT, text=TEXT, status=TEXT, note=OPT_TEXT), max_size=3
        ).map(tuple),
        explanation=OPT_TEXT,
    ),
    ConstraintPayload: st.builds(
        ConstraintPayload, constraint_id=TEXT, scope=TEXT, source_record_id=OPT_TEXT
    ),
    DecisionPayload: st.builds(DecisionPayload, reason=OPT_TEXT),
    QuestionPayload: st.builds(QuestionPayload, question_key=TEXT, answer=OPT_TEXT),
}

scopes = st.builds(
    Scope, space_id=TEXT, actor_id=TEXT, session_id=TEXT, run_id=OPT_TEXT, instance_id=OPT_TEXT
)
sources = st.builds(
    Source, producer=TEXT, host_id=TEXT, occurred_at_ms=INT64, resource_version=OPT_TEXT
)
contents = st.builds(
    Content, sha256=TEXT, length=INT64, inline=OPT_TEXT, ref=OPT_TEXT, media_type=TEXT
)


def events_for_kind(kind: RecordKind) -> st.SearchStrategy[ContextEvent]:
    """Arbitrary (not necessarily valid) events whose payload matches ``kind``."""
    return st.builds(
        ContextEvent,
        event_id=TEXT,
        event_key=TEXT,
        scope=scopes,
        kind=st.just(kind),
        authority=st.sampled_from(Authority),
        source=sources,
        content=contents,
        payload=PAYLOAD_STRATEGIES[PAYLOAD_FOR_KIND[kind]],
        visibility=st.sampled_from(Visibility),
        expected_revision=OPT_LONG,
        operation_id=OPT_TEXT,
    )


any_event = st.sampled_from(RecordKind).flatmap(events_for_kind)


# --- valid event builder --------------------------------------------------------------

DEFAULT_AUTHORITY: dict[RecordKind, Authority] = {
    RecordKind.USER_INPUT: Authority.USER,
    RecordKind.SUPPLEMENT: Authority.USER,
    RecordKind.ASSISTANT_MESSAGE: Authority.MODEL,
    RecordKind.TOOL_CALL: Authority.MODEL,
    RecordKind.TOOL_OUTCOME: Authority.TOOL,
    RecordKind.RESOURCE_ACTIVATION: Authority.HOST,
    RecordKind.CHILD_RESULT: Authority.HOST,
    RecordKind.RUN_STARTED: Authority.HOST,
    RecordKind.RUN_RESUMED: Authority.HOST,
    RecordKind.RUN_CANCELLED: Authority.HOST,
    RecordKind.RUN_FINISHED: Authority.HOST,
    RecordKind.RECORD_RETRACTED: Authority.HOST,
    RecordKind.PLAN_UPDATED: Authority.MODEL,
    RecordKind.CONSTRAINT_SET: Authority.USER,
    RecordKind.CONSTRAINT_RETIRED: Authority.HOST,
    RecordKind.DECISION_RECORDED: Authority.MODEL,
    RecordKind.QUESTION_OPENED: Authority.MODEL,
    RecordKind.QUESTION_CLOSED: Authority.MODEL,
}


def default_payload(kind: RecordKind) -> Any:
    return {
        RecordKind.USER_INPUT: UserInputPayload(),
        RecordKind.SUPPLEMENT: UserInputPayload("supplement"),
        RecordKind.ASSISTANT_MESSAGE: AssistantMessagePayload("op-model"),
        RecordKind.TOOL_CALL: ToolCallPayload("call-1", "search", '{"q": "x"}'),
        RecordKind.TOOL_OUTCOME: ToolOutcomePayload("call-1", "search", ToolStatus.OK),
        RecordKind.RESOURCE_ACTIVATION: ResourceActivationPayload("skill", "sk-1", "v1", "0" * 64),
        RecordKind.CHILD_RESULT: ChildResultPayload("child-1", "op-child", "ok", "done", 3),
        RecordKind.RUN_STARTED: RunLifecyclePayload(),
        RecordKind.RUN_RESUMED: RunLifecyclePayload(),
        RecordKind.RUN_CANCELLED: RunLifecyclePayload("stop"),
        RecordKind.RUN_FINISHED: RunLifecyclePayload(),
        RecordKind.RECORD_RETRACTED: RetractionPayload(TARGET_RECORD_ID, "user undo"),
        RecordKind.PLAN_UPDATED: PlanPayload((PlanItem("p1", "read the spec", "in_progress"),)),
        RecordKind.CONSTRAINT_SET: ConstraintPayload("c1"),
        RecordKind.CONSTRAINT_RETIRED: ConstraintPayload("c1"),
        RecordKind.DECISION_RECORDED: DecisionPayload("it is simpler"),
        RecordKind.QUESTION_OPENED: QuestionPayload("k1"),  # its own key (make_event's)
        RecordKind.QUESTION_CLOSED: QuestionPayload("q-1", "yes"),
    }[kind]


TARGET_RECORD_ID = "rec_" + "0" * 32  # a well-formed record id (the default retraction's)


def make_event(
    kind: RecordKind,
    event_key: str = "k1",
    *,
    space: str = "space-1",
    actor: str = "actor-1",
    session: str = "sess-1",
    run: str | None = "run-1",
    instance: str | None = "main",
    authority: Authority | None = None,
    payload: Any = None,
    content: Content | None = None,
    operation_id: str | None = None,
    text: str = "hello",
) -> ContextEvent:
    pl = payload if payload is not None else default_payload(kind)
    if payload is None and kind is RecordKind.QUESTION_OPENED:
        pl = QuestionPayload(event_key)  # an opened question names itself
    if operation_id is None and isinstance(pl, RetractionPayload):
        operation_id = pl.target_record_id  # a retraction's operation is its target
    return ContextEvent(
        event_id=f"id-{event_key}",
        event_key=event_key,
        scope=Scope(space, actor, session, run, instance),
        kind=kind,
        authority=authority if authority is not None else DEFAULT_AUTHORITY[kind],
        source=Source("runtime", "host-1", 1_700_000_000_000),
        content=content if content is not None else Content.text(text),
        payload=pl,
        operation_id=operation_id,
    )
