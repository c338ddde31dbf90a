"""schemas/codec.py + schemas/wire.py: single-object encoding, round trips, bad input."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import codec
from schemas.contracts import ContextEvent, RecordKind, to_wire
from schemas.errors import InvalidEvent, UnknownSchema
from schemas.wire import (
    CommittedRecord,
    DeadLetter,
    decode_committed,
    decode_dead_letter,
    decode_event,
    decode_event_and_payload,
    encode_committed,
    encode_dead_letter,
    encode_event,
)

from .factories import INT64, OPT_LONG, OPT_TEXT, TEXT, any_event, events_for_kind, make_event

# --- an independent CRC-64-AVRO (Rabin) fingerprint, straight from the Avro spec -------

_EMPTY = 0xC15D213AA4D7A795


def _fp_table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY & -(fp & 1))
        table.append(fp)
    return table


_FP_TABLE = _fp_table()


def rabin_fingerprint(data: bytes) -> bytes:
    """CRC-64-AVRO of ``data`` as the 8 little-endian bytes of single-object encoding."""
    fp = _EMPTY
    for b in data:
        fp = (fp >> 8) ^ _FP_TABLE[(fp ^ b) & 0xFF]
    return fp.to_bytes(8, "little")


_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def canonical_form(schema: Any, namespace: str = "", seen: set[str] | None = None) -> str:
    """Avro Parsing Canonical Form (PRIMITIVES, FULLNAMES, STRIP, ORDER, WHITESPACE)."""
    seen = set() if seen is None else seen

    def fullname(name: str, ns: str) -> str:
        return name if "." in name or not ns else f"{ns}.{name}"

    if isinstance(schema, str):
        return json.dumps(schema if schema in _PRIMITIVES else fullname(schema, namespace))
    if isinstance(schema, list):
        return "[" + ",".join(canonical_form(s, namespace, seen) for s in schema) + "]"
    t = schema["type"]
    if isinstance(t, (dict, list)):
        return canonical_form(t, namespace, seen)
    if t in _PRIMITIVES:
        return json.dumps(t)
    if t == "array":
        return '{"type":"array","items":' + canonical_form(schema["items"], namespace, seen) + "}"
    if t == "map":
        return '{"type":"map","values":' + canonical_form(schema["values"], namespace, seen) + "}"
    ns = schema.get("namespace", namespace)
    full = fullname(schema["name"], ns)
    if full in seen:
        return json.dumps(full)
    seen.add(full)
    inner_ns = full.rsplit(".", 1)[0] if "." in full else ""
    head = '{"name":' + json.dumps(full) + ',"type":' + json.dumps(t)
    if t == "record":
        fields = ",".join(
            '{"name":'
            + json.dumps(f["name"])
            + ',"type":'
            + canonical_form(f["type"], inner_ns, seen)
            + "}"
            for f in schema["fields"]
        )
        return head + ',"fields":[' + fields + "]}"
    if t == "enum":
        return head + ',"symbols":' + json.dumps(schema["symbols"], separators=(",", ":")) + "}"
    if t == "fixed":
        return head + ',"size":' + str(schema["size"]) + "}"
    raise AssertionError(f"unexpected schema type {t}")


def _avsc(file_name: str) -> Any:
    return json.loads(resources.files("schemas").joinpath("avro", file_name).read_text("utf-8"))


# --- header / fingerprint -------------------------------------------------------------


def test_reference_fingerprint_of_int_matches_avro_spec() -> None:
    # Sanity of the independent implementation itself (value from the Avro spec).
    assert rabin_fingerprint(canonical_form("int").encode()).hex() == "8f5c393f1ad57572"
    assert canonical_form({"type": "int"}) == '"int"'


@pytest.mark.parametrize("file_name", codec.ALL_SCHEMAS)
def test_schema_fingerprint_is_crc64_avro_of_canonical_form(file_name: str) -> None:
    expected = rabin_fingerprint(canonical_form(_avsc(file_name)).encode("utf-8"))
    assert codec.schema(file_name).fingerprint == expected
    assert len(expected) == 8


def test_fingerprints_are_distinct() -> None:
    fps = {codec.schema(n).fingerprint for n in codec.ALL_SCHEMAS}
    assert len(fps) == len(codec.ALL_SCHEMAS)


def test_encoded_event_has_single_object_header() -> None:
    data = encode_event(make_event(RecordKind.USER_INPUT))
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == rabin_fingerprint(
        canonical_form(_avsc(codec.CONTEXT_EVENT)).encode("utf-8")
    )
    assert len(data) > codec.HEADER_LEN


@pytest.mark.spec("R3.1")
def test_encoding_is_deterministic() -> None:
    ev = make_event(RecordKind.ASSISTANT_MESSAGE, "model:op-1", operation_id="op-1")
    assert encode_event(ev) == encode_event(ev)


# --- round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(RecordKind), ids=str)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_event_round_trip_per_kind(kind: RecordKind, data: st.DataObject) -> None:
    ev = data.draw(events_for_kind(kind))
    out = decode_event(encode_event(ev))
    assert out == ev
    assert type(out.payload) is type(ev.payload)
    assert out.kind is ev.kind


@settings(max_examples=200, deadline=None)
@given(ev=any_event)
def test_event_round_trip_any(ev: ContextEvent) -> None:
    assert decode_event(encode_event(ev)) == ev


@settings(max_examples=300, deadline=None)
@given(ev=st.sampled_from(RecordKind).flatmap(events_for_kind))
def test_the_decoded_payload_is_what_the_processor_would_store(ev: ContextEvent) -> None:
    """The processor stores the decoder's payload dict instead of ``to_wire`` of the
    payload it built from it (issue 13): the two are equal for every payload type, and so
    is their JSON up to key order (the Avro schema's field order is not always the
    dataclass's; the column is jsonb, which does not keep key order)."""
    out, wire = decode_event_and_payload(encode_event(ev))
    assert wire == to_wire(out.payload)
    assert json.dumps(wire, sort_keys=True) == json.dumps(to_wire(out.payload), sort_keys=True)


committed_records = st.builds(
    CommittedRecord,
    record_id=TEXT,
    session_id=TEXT,
    session_sequence=INT64,
    run_id=OPT_TEXT,
    instance_id=OPT_TEXT,
    instance_sequence=OPT_LONG,
    event_key=TEXT,
    kind=TEXT,
    token_count=INT64,
    token_method=TEXT,
    content_sha256=TEXT,
    committed_at_ms=INT64,
    source_partition=st.integers(-(2**31), 2**31 - 1),
    source_offset=INT64,
)
dead_letters = st.builds(
    DeadLetter,
    reason_code=TEXT,
    reason=TEXT,
    source_topic=TEXT,
    source_partition=st.integers(-(2**31), 2**31 - 1),
    source_offset=INT64,
    key=st.none() | st.binary(max_size=20),
    value=st.none() | st.binary(max_size=40),
    session_id=OPT_TEXT,
    event_key=OPT_TEXT,
    failed_at_ms=INT64,
)


@settings(max_examples=100, deadline=None)
@given(rec=committed_records)
def test_committed_record_round_trip(rec: CommittedRecord) -> None:
    data = encode_committed(rec)
    assert data[2:10] == codec.schema(codec.COMMITTED_RECORD).fingerprint
    assert decode_committed(data) == rec


@settings(max_examples=100, deadline=None)
@given(dl=dead_letters)
def test_dead_letter_round_trip(dl: DeadLetter) -> None:
    data = encode_dead_letter(dl)
    assert data[2:10] == codec.schema(codec.DEAD_LETTER).fingerprint
    assert decode_dead_letter(data) == dl


def test_dead_letter_keeps_original_bytes_verbatim() -> None:
    original = encode_event(make_event(RecordKind.USER_INPUT))
    dl = DeadLetter("bad_scope", "x", "ctx.records", 3, 17, b"sess-1", original, None, None, 1)
    assert decode_dead_letter(encode_dead_letter(dl)).value == original


# --- bad input --------------------------------------------------------------------------


def _reason(data: bytes) -> str:
    with pytest.raises(InvalidEvent) as info:
        decode_event(data)
    return info.value.reason_code


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc3",
        b"\xc3\x01",
        b"\xc3\x01\x00\x01\x02",
        b"{}",
        b"\x00" * 30,
        b"\xc3\x02" + b"\x00" * 20,
    ],
    ids=["empty", "one-byte", "magic-only", "short-fingerprint", "json", "zeros", "bad-magic"],
)
def test_bad_header(data: bytes) -> None:
    assert _reason(data) == "bad_header"


def test_unknown_fingerprint() -> None:
    body = encode_event(make_event(RecordKind.USER_INPUT))[codec.HEADER_LEN :]
    data = b"\xc3\x01" + b"\xde\xad\xbe\xef\x00\x11\x22\x33" + body
    with pytest.raises(UnknownSchema) as info:
        decode_event(data)
    assert info.value.reason_code == "unknown_schema"
    assert info.value.details["fingerprint"] == "deadbeef00112233"
    assert isinstance(info.value, InvalidEvent)


@settings(max_examples=200, deadline=None)
@given(fp=st.binary(min_size=8, max_size=8), body=st.binary(max_size=30))
def test_random_fingerprint_is_unknown_schema(fp: bytes, body: bytes) -> None:
    known = {codec.schema(n).fingerprint for n in codec.ALL_SCHEMAS}
    if fp in known:
        return
    assert _reason(b"\xc3\x01" + fp + body) == "unknown_schema"


def test_every_truncation_is_rejected() -> None:
    data = encode_event(make_event(RecordKind.TOOL_OUTCOME, text="a tool result"))
    for n in range(len(data)):
        expected = "bad_header" if n < codec.HEADER_LEN else "bad_body"
        assert _reason(data[:n]) == expected, n


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=64))
def test_garbage_body_never_escapes_as_other_exception(body: bytes) -> None:
    data = b"\xc3\x01" + codec.schema(codec.CONTEXT_EVENT).fingerprint + body
    try:
        ev = decode_event(data)
    except InvalidEvent as exc:
        assert exc.reason_code == "bad_body"
    else:  # a random body may happen to be a valid encoding: then it must be a real event
        assert isinstance(ev, ContextEvent)


def test_empty_body_is_bad_body() -> None:
    assert _reason(b"\xc3\x01" + codec.schema(codec.CONTEXT_EVENT).fingerprint) == "bad_body"


def test_wrong_record_type_is_refused() -> None:
    rec = CommittedRecord("r", "s", 1, None, None, None, "k", "user_input", 1, "m", "h", 1, 0, 0)
    with pytest.raises(InvalidEvent) as info:
        decode_event(encode_committed(rec))
    assert info.value.reason_code == "wrong_record_type"


def test_trailing_bytes_after_the_body_are_rejected() -> None:
    from schemas import codec as _codec
    from schemas.errors import InvalidEvent as _Invalid

    good = _codec.encode(
        _codec.DEAD_LETTER,
        {
            "reason_code": "x",
            "reason": "y",
            "source_topic": "t",
            "source_partition": 0,
            "source_offset": 1,
            "key": None,
            "value": None,
            "session_id": None,
            "event_key": None,
            "failed_at_ms": 0,
        },
    )
    assert _codec.decode(_codec.DEAD_LETTER, good)["reason_code"] == "x"
    with pytest.raises(_Invalid) as err:
        _codec.decode(_codec.DEAD_LETTER, good + b"\x00")
    assert err.value.reason_code == "bad_body"
