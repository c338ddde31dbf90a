"""schemas/validation.py: every reason code, and valid events pass."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.contracts import (
    AssistantMessagePayload,
    Authority,
    Content,
    RecordKind,
    Scope,
    ToolCallSpec,
    UserInputPayload,
)
from schemas.errors import InvalidEvent
from schemas.validation import ALLOWED_AUTHORITY, MAX_KEY_LEN, RUN_SCOPED, validate_event

from .factories import DEFAULT_AUTHORITY, make_event


def _code(ev: Any) -> str:
    with pytest.raises(InvalidEvent) as info:
        validate_event(ev)
    return info.value.reason_code


@pytest.mark.parametrize("kind", list(RecordKind), ids=str)
def test_valid_event_of_every_kind_passes(kind: RecordKind) -> None:
    assert validate_event(make_event(kind)) is None


def test_valid_reference_content_passes() -> None:
    digest = "ab" * 32
    validate_event(make_event(RecordKind.TOOL_OUTCOME, content=Content.reference(digest, 10**6)))


def test_resource_activation_may_be_session_scoped() -> None:
    validate_event(make_event(RecordKind.RESOURCE_ACTIVATION, run=None, instance=None))


@pytest.mark.parametrize("key", ["", "x" * (MAX_KEY_LEN + 1)], ids=["empty", "too-long"])
def test_bad_event_key(key: str) -> None:
    assert _code(make_event(RecordKind.USER_INPUT, key)) == "bad_event_key"


def test_event_key_at_max_length_passes() -> None:
    validate_event(make_event(RecordKind.USER_INPUT, "x" * MAX_KEY_LEN))


@pytest.mark.parametrize(
    "field", ["space_id", "actor_id", "session_id"], ids=["space", "actor", "session"]
)
def test_bad_scope_missing_identity(field: str) -> None:
    ev = make_event(RecordKind.USER_INPUT)
    ev = dataclasses.replace(ev, scope=dataclasses.replace(ev.scope, **{field: ""}))
    assert _code(ev) == "bad_scope"


@pytest.mark.parametrize("kind", sorted(RUN_SCOPED), ids=str)
@pytest.mark.parametrize("missing", ["run_id", "instance_id"])
def test_bad_scope_run_scoped_kind_without_thread(kind: RecordKind, missing: str) -> None:
    ev = make_event(kind)
    ev = dataclasses.replace(ev, scope=dataclasses.replace(ev.scope, **{missing: None}))
    assert _code(ev) == "bad_scope"


def test_payload_kind_mismatch() -> None:
    ev = make_event(RecordKind.ASSISTANT_MESSAGE, payload=UserInputPayload())
    assert _code(ev) == "payload_kind_mismatch"
    ev = make_event(RecordKind.USER_INPUT, payload=AssistantMessagePayload("op"))
    assert _code(ev) == "payload_kind_mismatch"


@pytest.mark.spec("R3.3")
def test_assistant_message_claiming_system_authority_is_refused() -> None:
    ev = make_event(RecordKind.ASSISTANT_MESSAGE, authority=Authority.SYSTEM)
    assert _code(ev) == "authority_not_allowed"


@pytest.mark.spec("R3.3")
@pytest.mark.parametrize(
    ("kind", "authority"),
    [
        (RecordKind.ASSISTANT_MESSAGE, Authority.DEVELOPER),
        (RecordKind.ASSISTANT_MESSAGE, Authority.HOST),
        (RecordKind.TOOL_OUTCOME, Authority.DEVELOPER),
        (RecordKind.TOOL_OUTCOME, Authority.SYSTEM),
        (RecordKind.CHILD_RESULT, Authority.SYSTEM),
        (RecordKind.USER_INPUT, Authority.SYSTEM),
        (RecordKind.TOOL_CALL, Authority.SYSTEM),
    ],
)
def test_forged_authority_is_refused(kind: RecordKind, authority: Authority) -> None:
    assert _code(make_event(kind, authority=authority)) == "authority_not_allowed"


@pytest.mark.spec("R3.3")
@settings(max_examples=100, deadline=None)
@given(kind=st.sampled_from(RecordKind), authority=st.sampled_from(Authority))
def test_authority_table_is_enforced_exactly(kind: RecordKind, authority: Authority) -> None:
    ev = make_event(kind, authority=authority)
    if authority in ALLOWED_AUTHORITY[kind]:
        validate_event(ev)
    else:
        assert _code(ev) == "authority_not_allowed"


@pytest.mark.spec("R3.3")
def test_model_and_tool_text_never_reach_system_or_developer() -> None:
    for kind in (RecordKind.ASSISTANT_MESSAGE, RecordKind.TOOL_OUTCOME, RecordKind.CHILD_RESULT):
        assert not ALLOWED_AUTHORITY[kind] & {Authority.SYSTEM, Authority.DEVELOPER}
    assert (
        DEFAULT_AUTHORITY[RecordKind.ASSISTANT_MESSAGE]
        in ALLOWED_AUTHORITY[RecordKind.ASSISTANT_MESSAGE]
    )


@pytest.mark.parametrize(
    "content",
    [
        Content(sha256="a" * 64, length=1),  # neither inline nor ref
        Content(sha256="a" * 64, length=1, inline="x", ref="a" * 64),  # both
        Content(sha256="a" * 64, length=1, ref="b" * 64),  # ref is not the sha256
    ],
    ids=["neither", "both", "ref-not-hash"],
)
def test_bad_content(content: Content) -> None:
    assert _code(make_event(RecordKind.USER_INPUT, content=content)) == "bad_content"


@pytest.mark.spec("R3.4")
def test_content_hash_mismatch() -> None:
    good = Content.text("hello")
    bad = dataclasses.replace(good, sha256=hashlib.sha256(b"hellO").hexdigest())
    assert _code(make_event(RecordKind.USER_INPUT, content=bad)) == "content_hash_mismatch"


@pytest.mark.spec("R3.4")
def test_content_length_mismatch() -> None:
    good = Content.text("héllo")  # 6 UTF-8 bytes, 5 characters
    assert good.length == 6
    bad = dataclasses.replace(good, length=5)
    assert _code(make_event(RecordKind.USER_INPUT, content=bad)) == "content_length_mismatch"


@pytest.mark.spec("R4.1")
@pytest.mark.parametrize("purpose", ["action", "compaction", "completion", "verification"])
def test_accepted_purposes(purpose: str) -> None:
    validate_event(
        make_event(RecordKind.ASSISTANT_MESSAGE, payload=AssistantMessagePayload("op", purpose))
    )


@pytest.mark.spec("R4.1")
@pytest.mark.parametrize("purpose", ["", "Action", "summary", "tool"])
def test_bad_purpose(purpose: str) -> None:
    ev = make_event(RecordKind.ASSISTANT_MESSAGE, payload=AssistantMessagePayload("op", purpose))
    assert _code(ev) == "bad_purpose"


@pytest.mark.parametrize(
    "calls",
    [
        (ToolCallSpec("", "search", "{}"),),
        (ToolCallSpec("c1", "search", "{}"), ToolCallSpec("c1", "read", "{}")),
    ],
    ids=["empty-id", "repeated-id"],
)
def test_bad_tool_call(calls: tuple[ToolCallSpec, ...]) -> None:
    ev = make_event(
        RecordKind.ASSISTANT_MESSAGE, payload=AssistantMessagePayload("op", tool_calls=calls)
    )
    assert _code(ev) == "bad_tool_call"


@pytest.mark.parametrize("args", ["", "{", "{'a': 1}", '{"a": }', "not json"])
def test_bad_tool_arguments(args: str) -> None:
    calls = (ToolCallSpec("c1", "search", "{}"), ToolCallSpec("c2", "search", args))
    ev = make_event(
        RecordKind.ASSISTANT_MESSAGE, payload=AssistantMessagePayload("op", tool_calls=calls)
    )
    with pytest.raises(InvalidEvent) as info:
        validate_event(ev)
    assert info.value.reason_code == "bad_tool_arguments"
    assert "c2" in info.value.message


def test_several_valid_tool_calls_pass() -> None:
    calls = tuple(ToolCallSpec(f"c{i}", "search", f'{{"i": {i}}}') for i in range(5))
    validate_event(
        make_event(
            RecordKind.ASSISTANT_MESSAGE, payload=AssistantMessagePayload("op", tool_calls=calls)
        )
    )


def test_session_only_scope_passes_for_resource_but_not_for_user_input() -> None:
    scope = Scope("space-1", "actor-1", "sess-1")
    ok = dataclasses.replace(make_event(RecordKind.RESOURCE_ACTIVATION), scope=scope)
    validate_event(ok)
    bad = dataclasses.replace(make_event(RecordKind.USER_INPUT), scope=scope)
    assert _code(bad) == "bad_scope"
