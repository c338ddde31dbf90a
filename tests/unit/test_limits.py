"""The bus limits (README "Limits"): what PostgreSQL or Kafka cannot hold is refused by
pure validation before any SQL, and a dead letter always fits the producer."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.contracts import (
    AssistantMessagePayload,
    Content,
    RecordKind,
    ToolCallPayload,
    ToolCallSpec,
)
from schemas.errors import InvalidEvent
from schemas.json_text import json_depth
from schemas.limits import MAX_ID_LEN, MAX_JSON_DEPTH, MAX_KEY_LEN, MAX_RUN_ID_LEN, json_problem
from schemas.validation import (
    INLINE_MAX_BYTES,
    run_start_problem,
    validate_control,
    validate_event,
)
from schemas.wire import (
    DEAD_LETTER_MAX_BYTES,
    BudgetObservation,
    CompactionOutcome,
    ControlEvent,
    DeadLetter,
    decode_dead_letter,
    encode_dead_letter,
    fit_dead_letter,
    truncated_original,
)
from services.sdk.client import INLINE_LIMIT

from .factories import any_event, make_event

pytestmark = pytest.mark.spec("R3.1", "R3.3", "R3.4", "R15.3")


def _code(fn: Any, *args: Any) -> str:
    with pytest.raises(InvalidEvent) as info:
        fn(*args)
    return info.value.reason_code


def _deep(n: int) -> str:
    return "[" * n + "]" * n


# --- JSON depth, without recursion ------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab:,'),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(alphabet='[]{}"\\ab', max_size=4), inner, max_size=3)
    ),
    max_leaves=20,
)


def _real_depth(v: Any) -> int:
    if isinstance(v, list):
        return 1 + max((_real_depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((_real_depth(x) for x in v.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_json_depth_is_the_real_depth_whatever_the_strings_hold(value: Any) -> None:
    assert json_depth(json.dumps(value)) == _real_depth(value)


def test_json_depth_of_100000_levels_needs_no_recursion() -> None:
    assert json_depth(_deep(100_000)) == 100_000


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
def test_tool_arguments_nested_too_deep_are_refused_not_a_recursion_error(depth: int) -> None:
    calls = (ToolCallSpec("c1", "search", _deep(depth)),)
    ev = make_event(
        RecordKind.ASSISTANT_MESSAGE, payload=AssistantMessagePayload("op", tool_calls=calls)
    )
    assert _code(validate_event, ev) == "nesting_too_deep"
    tool_call = make_event(
        RecordKind.TOOL_CALL, payload=ToolCallPayload("c1", "search", '{"a":' + _deep(depth) + "}")
    )
    assert _code(validate_event, tool_call) == "nesting_too_deep"


def test_arguments_at_the_depth_limit_pass() -> None:
    calls = (ToolCallSpec("c1", "search", _deep(MAX_JSON_DEPTH)),)
    validate_event(
        make_event(
            RecordKind.ASSISTANT_MESSAGE, payload=AssistantMessagePayload("op", tool_calls=calls)
        )
    )


def test_escaped_nul_in_arguments_is_refused() -> None:
    calls = (ToolCallSpec("c1", "search", '{"path": "a\\u0000b"}'),)
    ev = make_event(
        RecordKind.ASSISTANT_MESSAGE, payload=AssistantMessagePayload("op", tool_calls=calls)
    )
    assert _code(validate_event, ev) == "unstorable_text"


# --- U+0000 anywhere --------------------------------------------------------------------


def _string_fields(obj: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Paths of the free-form string fields (enums come off the wire as their values)."""
    out: list[tuple[str, ...]] = []
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, str) and not isinstance(v, enum.Enum):
            out.append((*path, f.name))
        elif dataclasses.is_dataclass(v):
            out += _string_fields(v, (*path, f.name))
    return out


def _replace(obj: Any, path: tuple[str, ...], value: Any) -> Any:
    if len(path) == 1:
        return dataclasses.replace(obj, **{path[0]: value})
    return dataclasses.replace(obj, **{path[0]: _replace(getattr(obj, path[0]), path[1:], value)})


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(RecordKind), data=st.data())
def test_nul_in_any_string_field_is_refused(kind: RecordKind, data: st.DataObject) -> None:
    ev = make_event(kind)
    path = data.draw(st.sampled_from(_string_fields(ev)))
    old = _get(ev, path)
    at = data.draw(st.integers(0, len(old)))
    bad = _replace(ev, path, old[:at] + "\x00" + old[at:])
    if path[-1] == "inline":  # keep hash and length consistent: only the NUL is wrong
        bad = dataclasses.replace(bad, content=Content.text(bad.content.inline))
    assert _code(validate_event, bad) in ("unstorable_text", "bad_event_key", "bad_id")


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for p in path:
        obj = getattr(obj, p)
    return obj


def test_nul_in_content_and_in_run_id_are_refused() -> None:
    assert _code(validate_event, make_event(RecordKind.USER_INPUT, text="a\x00b")) == (
        "unstorable_text"
    )
    assert _code(validate_event, make_event(RecordKind.USER_INPUT, run="run\x00x")) == (
        "unstorable_text"
    )


@settings(max_examples=300, deadline=None)
@given(ev=any_event)
def test_validation_raises_only_invalid_event_and_what_passes_is_storable(ev: Any) -> None:
    try:
        validate_event(ev)
    except InvalidEvent:
        return
    for path in _string_fields(ev):
        assert "\x00" not in _get(ev, path)


# --- ids and sizes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("run", "r" * 481),  # over the btree index row (issue 10)
        ("run", "r" * (MAX_RUN_ID_LEN + 1)),
        ("session", "s" * (MAX_ID_LEN + 1)),
        ("instance", "i" * (MAX_ID_LEN + 1)),
        ("actor", "a\tb"),
        ("space", "x\x7fy"),
    ],
)
def test_ids_over_their_length_or_with_control_characters_are_refused(
    field: str, value: str
) -> None:
    assert _code(validate_event, make_event(RecordKind.USER_INPUT, **{field: value})) == "bad_id"


def test_a_9kb_operation_id_is_refused() -> None:
    ev = make_event(RecordKind.TOOL_OUTCOME, operation_id="o" * 9000)
    assert _code(validate_event, ev) == "bad_id"
    ok = make_event(RecordKind.TOOL_OUTCOME, operation_id="o" * MAX_KEY_LEN)
    validate_event(ok)


def test_ids_at_their_limits_pass() -> None:
    validate_event(
        make_event(
            RecordKind.USER_INPUT,
            run="r" * MAX_RUN_ID_LEN,
            session="s" * MAX_ID_LEN,
            instance="i" * MAX_ID_LEN,
        )
    )


@pytest.mark.parametrize("length", [-1, -(2**63), 2**60])
def test_blob_reference_with_a_negative_or_absurd_length_is_refused(length: int) -> None:
    ref = Content.reference("ab" * 32, length)
    assert _code(validate_event, make_event(RecordKind.TOOL_OUTCOME, content=ref)) == "bad_size"


def test_blob_reference_must_be_a_sha256() -> None:
    ref = Content(sha256="XYZ", length=3, ref="XYZ")
    assert _code(validate_event, make_event(RecordKind.TOOL_OUTCOME, content=ref)) == (
        "bad_content"
    )


@pytest.mark.spec("R3.4")
def test_inline_content_over_the_inline_limit_must_go_through_the_content_store() -> None:
    assert INLINE_LIMIT == INLINE_MAX_BYTES  # the SDK externalizes exactly above it
    validate_event(make_event(RecordKind.TOOL_OUTCOME, text="x" * INLINE_MAX_BYTES))
    big = make_event(RecordKind.TOOL_OUTCOME, text="x" * (810 * 1024))
    assert _code(validate_event, big) == "inline_too_large"


def test_negative_revisions_and_timestamps_are_refused() -> None:
    ev = dataclasses.replace(make_event(RecordKind.USER_INPUT), expected_revision=-1)
    assert _code(validate_event, ev) == "bad_size"
    ev = make_event(RecordKind.USER_INPUT)
    ev = dataclasses.replace(ev, source=dataclasses.replace(ev.source, occurred_at_ms=-5))
    assert _code(validate_event, ev) == "bad_size"


# --- control events ---------------------------------------------------------------------


def _outcome(**kw: Any) -> ControlEvent:
    body = CompactionOutcome(
        "cmp_1",
        "succeeded",
        "save",
        summary_id="sum_1",
        summary_json=json.dumps({"draft": {}, "text": "t"}),
        covered_ranges=((1, 4),),
        covered_record_ids=("rec_1",),
        summary_tokens=3,
        covered_tokens=30,
    )
    return ControlEvent(
        "outcome:cmp_1", "sess-1", "run-1", "main", 1, dataclasses.replace(body, **kw)
    )


def _observation(**kw: Any) -> ControlEvent:
    body = BudgetObservation(900, 1000, 100, 50, 400, 7, None, "fp", "rev-1")
    return ControlEvent("obs:1", "sess-1", "run-1", "main", 1, dataclasses.replace(body, **kw))


def test_well_formed_control_events_pass() -> None:
    validate_control(_outcome())
    validate_control(_observation())
    validate_control(_outcome(status="failed", summary_json=None, covered_ranges=()))


@pytest.mark.parametrize("ranges", [((5, 4),), ((-1, 3),), ((1, 2), (9, 3)), ((1, 2, 3),)])
def test_malformed_covered_ranges_are_refused(ranges: Any) -> None:
    assert _code(validate_control, _outcome(covered_ranges=ranges)) == "bad_covered_range"


@pytest.mark.parametrize(
    ("summary_json", "code"),
    [
        (json.dumps({"draft": {"x": "a\x00"}, "text": "t"}), "unstorable_text"),
        ('{"draft": {}, "text": "\\u0000"}', "unstorable_text"),
        ('{"draft": ' + _deep(100_000) + ', "text": ""}', "nesting_too_deep"),
        ("[1, 2]", "bad_summary"),
        ("{not json", "bad_summary"),
    ],
)
def test_unstorable_summaries_are_refused(summary_json: str, code: str) -> None:
    assert _code(validate_control, _outcome(summary_json=summary_json)) == code


@pytest.mark.parametrize(
    "changes",
    [{"estimated_input": -1}, {"input_budget": 0}, {"view_watermark": -7}],
)
def test_observations_with_negative_sizes_are_refused(changes: dict[str, int]) -> None:
    assert _code(validate_control, _observation(**changes)) == "bad_size"


@pytest.mark.parametrize(
    "event",
    [
        ControlEvent("obs:1", "s" * 9000, "run-1", "main", 1, _observation().body),
        ControlEvent("obs:1", "sess-1", "run\x00", "main", 1, _observation().body),
        ControlEvent("o" * 9000, "sess-1", "run-1", "main", 1, _observation().body),
    ],
    ids=["long-session", "nul-run", "long-key"],
)
def test_control_event_ids_are_checked(event: ControlEvent) -> None:
    assert _code(validate_control, event) in ("bad_id", "unstorable_text", "bad_event_key")


# --- Prepare's run start ----------------------------------------------------------------


def test_run_start_ids_are_checked_before_publishing() -> None:
    assert run_start_problem(None, None) is None
    assert run_start_problem("run-1", "run-1.main") is None
    assert run_start_problem("r\x00", None) is not None
    assert run_start_problem("r" * (MAX_RUN_ID_LEN + 1), None) is not None
    assert run_start_problem(42, None) is not None
    assert run_start_problem("run-1", "i" * 10_000) is not None


# --- dead letters fit the producer ------------------------------------------------------


def _letter(key: bytes | None, value: bytes | None, reason: str = "bad") -> DeadLetter:
    return DeadLetter("bad_header", reason, "t.records", 3, 12345, key, value, None, None, 1)


@settings(max_examples=30, deadline=None)
@given(
    key_size=st.sampled_from([0, 10, 2_000_000]),
    value_size=st.sampled_from([0, 1000, 899_000, 1_048_576, 3_000_000]),
    reason_size=st.sampled_from([3, 100_000]),
)
def test_a_dead_letter_always_fits_and_names_what_it_cut(
    key_size: int, value_size: int, reason_size: int
) -> None:
    key, value = (
        b"k" * key_size,
        bytes(range(256)) * (value_size // 256) + b"v" * (value_size % 256),
    )
    dl = fit_dead_letter(_letter(key or None, value or None, "r" * reason_size))
    assert len(encode_dead_letter(dl)) <= DEAD_LETTER_MAX_BYTES
    for what, original, kept in (("value", value, dl.value), ("key", key, dl.key)):
        cut = truncated_original(dl, what)
        if cut is None:
            assert (kept or b"") == original
        else:
            assert cut == (len(original), hashlib.sha256(original).hexdigest())
            assert original.startswith(kept or b"")


def test_a_small_dead_letter_is_sent_whole() -> None:
    dl = _letter(b"k", b"v" * 1000)
    assert fit_dead_letter(dl) == dl


async def test_the_compaction_service_dead_letters_a_1mb_request_cut_to_fit() -> None:
    from tests.unit.fakes.compaction import FakeCompactionJobs
    from tests.unit.fakes.publisher import FakePublisher
    from tests.unit.test_compaction_loop import FakeWorker, loop, record

    value = b"\x00" + bytes(range(256)) * 4000  # ~1 MB of garbage on the requests topic
    publisher = FakePublisher()
    await loop(FakeWorker([]), FakeCompactionJobs(), publisher).consume(record(value))
    (sent,) = publisher.sent
    topic, data = sent.topic, sent.value
    dl = decode_dead_letter(data)
    assert topic == "dead" and len(data) <= DEAD_LETTER_MAX_BYTES
    assert truncated_original(dl) == (len(value), hashlib.sha256(value).hexdigest())


@pytest.mark.spec("R15.3")
@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ({"usage": {"input_tokens": 2**63 - 1}}, False),
        ({"usage": {"input_tokens": -(2**63)}}, False),
        ({"usage": {"input_tokens": True}}, False),
        ({"usage": {"input_tokens": 2**63}}, True),
        ({"usage": {"x": [[None, 1], {"deep": [35053898792782986332972743028375552]}]}}, True),
        ([-(2**63) - 1], True),
        (2**64, True),
    ],
)
def test_integers_past_64_bits_are_refused_before_an_encoder_fails_on_them(
    value: object, refused: bool
) -> None:
    """Found by schemathesis: a model-call result whose usage held 10**34 was a 500 (the
    jsonb encoder's 'Integer exceeds 64-bit range'); every request body now refuses it."""
    assert (json_problem(value) is not None) is refused
