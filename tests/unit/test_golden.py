"""Golden payloads pin wire compatibility: committed bytes must keep decoding to the
same objects, and today's encoder must still produce exactly those bytes.

Regenerate (only on a deliberate, compatible schema change) with
``.venv/bin/python tests/unit/make_golden.py``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from schemas.contracts import (
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
from schemas.wire import (
    CommittedRecord,
    DeadLetter,
    decode_committed,
    decode_dead_letter,
    decode_event,
    encode_committed,
    encode_dead_letter,
    encode_event,
)

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden"

_SCOPE = Scope("space-g", "actor-g", "sess-g", "run-g", "main-g")
_SOURCE = Source("runtime-g", "host-g", 1_700_000_000_123, None)


def _event(key: str, kind: RecordKind, authority: Authority, text: str, payload: Any, **kw: Any):
    return ContextEvent(
        event_id=f"evt-{key}",
        event_key=key,
        scope=kw.pop("scope", _SCOPE),
        kind=kind,
        authority=authority,
        source=kw.pop("source", _SOURCE),
        content=kw.pop("content", Content.text(text)),
        payload=payload,
        **kw,
    )


GOLDEN_EVENTS: dict[str, ContextEvent] = {
    "user_input": _event(
        "user:1",
        RecordKind.USER_INPUT,
        Authority.USER,
        "Summarise the Q3 report",
        UserInputPayload(),
    ),
    "assistant_message": _event(
        "model:op-1",
        RecordKind.ASSISTANT_MESSAGE,
        Authority.MODEL,
        "Let me look at both files.",
        AssistantMessagePayload(
            "op-1",
            "action",
            (
                ToolCallSpec("call-a", "read_file", '{"path": "q3.md"}'),
                ToolCallSpec("call-b", "search", '{"q": "revenue \\u00e9"}'),
            ),
            "tool_calls",
            1234,
            56,
        ),
        operation_id="op-1",
        expected_revision=7,
    ),
    "tool_call": _event(
        "call:call-c",
        RecordKind.TOOL_CALL,
        Authority.HOST,
        "",
        ToolCallPayload("call-c", "kb_search", '{"query": "budget"}', "mcp", "kb-server"),
        visibility=Visibility.ACTOR,
    ),
    "tool_outcome": _event(
        "tool:call-a",
        RecordKind.TOOL_OUTCOME,
        Authority.TOOL,
        "",
        ToolOutcomePayload(
            "call-a",
            "load_skill",
            ToolStatus.ERROR,
            "timeout",
            "skill_load",
            None,
            "view-sha",
            SkillRef("pdf-tools", "rev-3", "c" * 64),
        ),
        content=Content.reference("d" * 64, 250_000, "application/json"),
        operation_id="tool:call-a",
        source=Source("runtime-g", "host-g", 1_700_000_000_456, "res-v9"),
    ),
    "resource_activation": _event(
        "activate:skill:pdf-tools:rev-3",
        RecordKind.RESOURCE_ACTIVATION,
        Authority.HOST,
        "",
        ResourceActivationPayload("skill", "pdf-tools", "rev-3", "c" * 64, False),
        scope=Scope("space-g", "actor-g", "sess-g"),
    ),
    "child_result": _event(
        "child:op-child",
        RecordKind.CHILD_RESULT,
        Authority.HOST,
        "Child found 3 issues — ünïcödé ✓",
        ChildResultPayload(
            "child-1",
            "op-child",
            "succeeded",
            "3 issues",
            42,
            ("ev-1", "ev-2"),
            ("art-1",),
            (),
            ("ctx-1",),
        ),
        operation_id="child:op-child",
        visibility=Visibility.INSTANCE,
    ),
    "run_lifecycle": _event(
        "run_cancelled:run-g",
        RecordKind.RUN_CANCELLED,
        Authority.USER,
        "",
        RunLifecyclePayload("user pressed stop", "release-12"),
        visibility=Visibility.PRIVATE,
    ),
    "record_retracted": _event(
        "retract:rec_0123456789abcdef0123456789abcdef",
        RecordKind.RECORD_RETRACTED,
        Authority.HOST,
        "",
        RetractionPayload("rec_0123456789abcdef0123456789abcdef", "pop_item"),
        operation_id="rec_0123456789abcdef0123456789abcdef",
    ),
    "plan_updated": _event(
        "plan:call-7",
        RecordKind.PLAN_UPDATED,
        Authority.MODEL,
        "[done] read the spec\n[in_progress] write the parser",
        PlanPayload(
            (
                PlanItem("p1", "read the spec", "done"),
                PlanItem("p2", "write the parser", "in_progress", "tests first"),
            ),
            "the spec is read",
        ),
    ),
    "constraint_set": _event(
        "constraint:no-tabs:1",
        RecordKind.CONSTRAINT_SET,
        Authority.USER,
        "Never use tabs for indentation.",
        ConstraintPayload("no-tabs", "session", "rec_0123456789abcdef0123456789abcdef"),
    ),
    "decision_recorded": _event(
        "decision:call-8",
        RecordKind.DECISION_RECORDED,
        Authority.MODEL,
        "Use PostgreSQL, not SQLite.",
        DecisionPayload("row locks across processes"),
    ),
    "question_closed": _event(
        "close:question:call-9",
        RecordKind.QUESTION_CLOSED,
        Authority.HOST,
        "",
        QuestionPayload("question:call-9", "port 5432"),
    ),
}

GOLDEN_COMMITTED = CommittedRecord(
    record_id="rec_0123456789abcdef0123456789abcdef",
    session_id="sess-g",
    session_sequence=9_000_000_001,
    run_id="run-g",
    instance_id=None,
    instance_sequence=None,
    event_key="user:1",
    kind="user_input",
    token_count=5,
    token_method="tiktoken:cl100k_base",
    content_sha256="e" * 64,
    committed_at_ms=1_700_000_000_999,
    source_partition=3,
    source_offset=123_456,
)

GOLDEN_DEAD_LETTER = DeadLetter(
    reason_code="bad_header",
    reason="not Avro single-object encoded",
    source_topic="ctx.records",
    source_partition=0,
    source_offset=77,
    key=b"sess-g",
    value=b"\x00\xffgarbage",
    session_id=None,
    event_key=None,
    failed_at_ms=1_700_000_001_000,
)

# file name -> (expected object, encoder, decoder)
GOLDEN_CASES: dict[str, tuple[Any, Callable[[Any], bytes], Callable[[bytes], Any]]] = {
    **{f"event_{name}.bin": (ev, encode_event, decode_event) for name, ev in GOLDEN_EVENTS.items()},
    "committed_record.bin": (GOLDEN_COMMITTED, encode_committed, decode_committed),
    "dead_letter.bin": (GOLDEN_DEAD_LETTER, encode_dead_letter, decode_dead_letter),
}


def test_golden_events_cover_every_payload_type() -> None:
    from schemas.contracts import PAYLOAD_TYPES

    assert {type(ev.payload) for ev in GOLDEN_EVENTS.values()} == set(PAYLOAD_TYPES)


def test_golden_files_present() -> None:
    on_disk = {p.name for p in GOLDEN_DIR.glob("*.bin")}
    assert on_disk == set(GOLDEN_CASES)


@pytest.mark.parametrize("file_name", sorted(GOLDEN_CASES))
def test_golden_decodes_to_expected(file_name: str) -> None:
    expected, _, decode = GOLDEN_CASES[file_name]
    data = (GOLDEN_DIR / file_name).read_bytes()
    assert decode(data) == expected


@pytest.mark.parametrize("file_name", sorted(GOLDEN_CASES))
def test_encoding_expected_gives_golden_bytes(file_name: str) -> None:
    expected, encode, _ = GOLDEN_CASES[file_name]
    assert encode(expected) == (GOLDEN_DIR / file_name).read_bytes()


# The committed files themselves are pinned: regenerating them is a visible, reviewed
# change, never a silent way to make a compatibility failure go away.
GOLDEN_SHA256 = {
    "committed_record.bin": "22f0c4fdb68af6f057565cbabd57676018002d657bdfc862372e8472aee81e63",
    # Regenerated for the signer's space (issue 38): a new fingerprint, and the body of
    # dead_letter.v1/dead_letter.bin followed by the null of the added field.
    "dead_letter.bin": "6e3a820337d0710dbd02ef9c29ec4d5bffea736dafb20d2cd34b28ac63b9741f",
    # Regenerated for the decision and question kinds (issue 36): a new fingerprint in the
    # header; the bodies of the earlier kinds are byte for byte those of context_event.v3.
    "event_assistant_message.bin": (
        "25bb02346d83b667a4712cc8f3b9c05fbd0311006db71597b59b93f9c34fcaa3"
    ),
    "event_child_result.bin": "80fc7aca634758a0556b13fc13828c6878136ddc4b6726ea886f8892136c6ca5",
    "event_constraint_set.bin": "ff37780b89d9c597bc68b64abb55c269dc48acb050bbcef49043189cb96da1c2",
    "event_decision_recorded.bin": (
        "4c7ebe52415a60a0f640d5085b31925083730ebc3fa74ad9ddcc4d27dd2f03c9"
    ),
    "event_plan_updated.bin": "f0a1ea07f7745c9563f7289d70762a5b932d116998ed2c56bec4f41f63a059cc",
    "event_question_closed.bin": "b2059f2e6911a11a96b5af38c1b72107f93dcee69429e5e30d9b41a61e84c5b8",
    "event_record_retracted.bin": (
        "7ac5f5e7daaabe6e98c683c3d00ca17f564eeaa17e196be51c2bb44a8dc13dff"
    ),
    "event_resource_activation.bin": (
        "6ed057b237d93ea26f520800a90d28e59f5799d44485ba0f32426b44cb1932df"
    ),
    "event_run_lifecycle.bin": "1855d9b21075bf400b25e21725138e14a8ec6acd8b1c5e71ac2cbf1e2419f4d8",
    "event_tool_call.bin": "8c88e9dc55c2b35bfc22d4462370e0b3e5c81e1c33502b7eac6f5fb329d79136",
    "event_tool_outcome.bin": "c9d71be38ae64dc4e7cd293071cd251caa195d2a854df0ca84c826023db31d04",
    "event_user_input.bin": "1288a53c9455470b1a433b95fa404f967db7e12e2af65d69aaa3329f6a0ebf4d",
}


@pytest.mark.parametrize("file_name", sorted(GOLDEN_CASES))
def test_golden_file_is_pinned(file_name: str) -> None:
    data = (GOLDEN_DIR / file_name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == GOLDEN_SHA256[file_name]
    assert data[:2] == b"\xc3\x01"


# Payloads of the previous ContextEvent writer (context_event.v1.avsc, before
# record_retracted): still in Kafka after an upgrade, so they must keep decoding. Never
# regenerated; pinned as they were committed.
EARLIER_DIR = GOLDEN_DIR / "context_event.v1"
EARLIER_SHA256 = {
    "event_assistant_message.bin": (
        "05a5688da79b70121205d2edbf04aca4bf49397f84c4d73458714b68bab1616b"
    ),
    "event_child_result.bin": "0e982c590c9ff423f575e34ee3664e1ad281707c148f1ff353bd7661c3a932fa",
    "event_resource_activation.bin": (
        "3c55c6fcf3fdf88d764ae58add67e5e7302f087c354b2dfc03d50f7dac8ca84f"
    ),
    "event_run_lifecycle.bin": "10a53543ff3bfb86b68d5d8ea751fc2717e8c2a16fa79624fd8fa71e01582d1f",
    "event_tool_call.bin": "e36e129bcf9613c763cc95a7232545c3d06f097131ce67026e04379d8fecb806",
    "event_tool_outcome.bin": "13158225e4f2c18bb5976a5f43ffe847e174edf28d75b82fcc79a5e2812a613d",
    "event_user_input.bin": "c49ef3f23c99cf7c0c67386337c951efb06a6411f37b110d2d5330a0a0f24fac",
}


# Payloads of context_event.v2.avsc (before the plan and constraint kinds, issue 24): the
# files that were pinned above until then, kept as they were committed.
V2_DIR = GOLDEN_DIR / "context_event.v2"
V2_SHA256 = {
    "event_assistant_message.bin": (
        "fa9a7be1bdc419ad12c135d5a3ba1fc8558702c567554bed082f497106670482"
    ),
    "event_child_result.bin": "481dfb5afe84657acd5369d2151807b895c4c5c24be9c60c81878baecb3bccf4",
    "event_record_retracted.bin": (
        "f8964fdd5441ee6c9e869dcedcb9ca070be671a9123f13cef9856f838f89f611"
    ),
    "event_resource_activation.bin": (
        "29adc08d09f66217c40bb3fc14faecaa23d3eb23f3f1be1f1e653936fa15f79f"
    ),
    "event_run_lifecycle.bin": "6801ceaa188c378b6a16c43681add8966ed07b0ed90b2794a1d93cf7080c7274",
    "event_tool_call.bin": "4905a00e38f475ba4c20899b1174cd512a40c10bd66a631910be2ca9af14990d",
    "event_tool_outcome.bin": "24f0b39d1f5b52986d80332f83e6bac1487f7ee5fde8604c4770e06c78206bdc",
    "event_user_input.bin": "ddd8181b3fcbd77ccacd32bb18073a7e3b45d3f0f7ae0c92c6be0eea37726e47",
}
# Payloads of context_event.v3.avsc (before the decision and question kinds, issue 36):
# the files that were pinned above until then, kept as they were committed.
V3_DIR = GOLDEN_DIR / "context_event.v3"
V3_SHA256 = {
    "event_assistant_message.bin": (
        "deb12fc5232dfa885bde4183e89efadd34d7b16eb7eac0ce2ccd7bf1e1a7d806"
    ),
    "event_child_result.bin": "aac0d25755a6094ec2caeaf0fc2626e142068fb642acd20b521c3486ad27b8af",
    "event_constraint_set.bin": "ab6c1f1070fcb366aea11582952edbf74abe85027b34483a1516710e79c501b7",
    "event_plan_updated.bin": "ef481ac8acd90def5bac9e41a197ce33a1bd97d55123ccb3f2bd85666e20af15",
    "event_record_retracted.bin": (
        "9e3e72c3768988e3d67773c996b52908b8fcbac6bf4ed96755af2d4a7b91c98f"
    ),
    "event_resource_activation.bin": (
        "f31186ebaa283695bce9a7b6e5854602b140ab4ede09db9d3e6c20a1a46ec1a0"
    ),
    "event_run_lifecycle.bin": "758df2dfadc29b49709f96053f9ec0ecdd5e775e22db2d2ecc6b315a2a39813c",
    "event_tool_call.bin": "24654b84e41b3aff240e8d6805ee329c1a2067eeddeaa548d8c66ba569b0db71",
    "event_tool_outcome.bin": "edb15553cab5591b62a881a23e6703eef184bd3830232bc5da915fc85a069b3c",
    "event_user_input.bin": "a1a4b4b2b9e24239022b047803c28b2f01846664cc8604da6ec26caa7240ef74",
}
_EARLIER = {
    "v1": (EARLIER_DIR, EARLIER_SHA256),
    "v2": (V2_DIR, V2_SHA256),
    "v3": (V3_DIR, V3_SHA256),
}
_EARLIER_CASES = [(w, n) for w, (_, pins) in _EARLIER.items() for n in sorted(pins)]


@pytest.mark.parametrize(("writer", "file_name"), _EARLIER_CASES)
def test_earlier_writer_payload_still_decodes(writer: str, file_name: str) -> None:
    folder, pins = _EARLIER[writer]
    data = (folder / file_name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == pins[file_name]
    expected, encode, decode = GOLDEN_CASES[file_name]
    assert decode(data) == expected
    # The symbol and the branch were appended: every earlier body is unchanged, only the
    # writer's fingerprint in the header differs.
    today = encode(expected)
    assert today[10:] == data[10:] and today[2:10] != data[2:10]


# The dead letter as the writer before the signer's space (dead_letter.v1.avsc) encoded
# it: still on the dead-letter topic after an upgrade, read with no space.
DEAD_LETTER_V1 = GOLDEN_DIR / "dead_letter.v1" / "dead_letter.bin"
DEAD_LETTER_V1_SHA256 = "aff81e72e259d198ad02f59e98299a54a1c6a1867f3e73e40e3f2c23855834ea"


def test_earlier_dead_letter_still_decodes() -> None:
    data = DEAD_LETTER_V1.read_bytes()
    assert hashlib.sha256(data).hexdigest() == DEAD_LETTER_V1_SHA256
    assert decode_dead_letter(data) == GOLDEN_DEAD_LETTER
    assert GOLDEN_DEAD_LETTER.space_id is None
    today = encode_dead_letter(GOLDEN_DEAD_LETTER)
    assert today[10:] == data[10:] + b"\x00" and today[2:10] != data[2:10]


def test_earlier_files_present() -> None:
    for folder, pins in _EARLIER.values():
        assert {p.name for p in folder.glob("*.bin")} == set(pins)
