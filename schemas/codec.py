"""Avro codec: single-object encoding (``C3 01`` + CRC-64-AVRO fingerprint + body).

Every schema is parsed once at import. A reader looks the writer's schema up by the
fingerprint in the header and resolves it against its own (reader) schema, so an older
producer's payload still decodes after a compatible change (golden files pin this).
"""

from __future__ import annotations

import io
import json
import typing
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import fastavro
import fastavro.schema

from schemas.errors import InvalidEvent, UnknownSchema

MAGIC = b"\xc3\x01"
HEADER_LEN = 10


@dataclass(frozen=True)
class AvroSchema:
    name: str
    parsed: Any
    fingerprint: bytes  # 8 bytes, little-endian CRC-64-AVRO of the canonical form


def _load(file_name: str) -> AvroSchema:
    text = resources.files("schemas").joinpath("avro", file_name).read_text("utf-8")
    parsed = typing.cast(dict[str, Any], fastavro.parse_schema(json.loads(text)))
    canonical = fastavro.schema.to_parsing_canonical_form(parsed)
    fp = bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))
    return AvroSchema(name=parsed["name"], parsed=parsed, fingerprint=fp)


@cache
def schema(file_name: str) -> AvroSchema:
    return _load(file_name)


CONTEXT_EVENT = "context_event.avsc"
COMMITTED_RECORD = "committed_record.avsc"
DEAD_LETTER = "dead_letter.avsc"
CONTROL_EVENT = "control_event.avsc"
COMPACTION_REQUEST = "compaction_request.avsc"
OBSERVABILITY_EVENT = "observability_event.avsc"
ALL_SCHEMAS = (
    CONTEXT_EVENT,
    COMMITTED_RECORD,
    DEAD_LETTER,
    CONTROL_EVENT,
    COMPACTION_REQUEST,
    OBSERVABILITY_EVENT,
)

# Earlier versions of a schema whose payloads may still be in Kafka (readable, never written).
# context_event.v1: before record_retracted; v2: before the plan and constraint
# kinds; v3: before the decision and question kinds — the same bytes, another
# fingerprint. compaction_request.v1: before the plan and constraint versions (read with
# their defaults, 0). control_event.v1: before an observation named the call in flight
# that holds its compressible prefix back (read as none); control_event.v2: before it
# carried the view's largest step (read as 0). dead_letter.v1 and
# observability_event.v5: before they named the signer's space (read as none).
EARLIER_WRITERS = (
    "observability_event.v3.avsc",
    "observability_event.v4.avsc",
    "observability_event.v5.avsc",
    "dead_letter.v1.avsc",
    "context_event.v1.avsc",
    "context_event.v2.avsc",
    "context_event.v3.avsc",
    "compaction_request.v1.avsc",
    "control_event.v1.avsc",
    "control_event.v2.avsc",
    # control_event.v3: before an observation carried the idle time and cache lifetime
    # (read as none: the cache is not known to be cold).
    "control_event.v3.avsc",
)

# Writer schemas we can read, by fingerprint. Older versions are registered here when a
# schema evolves, so that payloads already in Kafka keep decoding.
_WRITERS: dict[bytes, AvroSchema] = {}


def register_writer(s: AvroSchema) -> None:
    _WRITERS[s.fingerprint] = s


def _ensure_registered() -> None:
    if not _WRITERS:
        for name in ALL_SCHEMAS + EARLIER_WRITERS:
            register_writer(schema(name))


def encode(file_name: str, record: dict[str, Any]) -> bytes:
    s = schema(file_name)
    buf = io.BytesIO()
    buf.write(MAGIC)
    buf.write(s.fingerprint)
    fastavro.schemaless_writer(buf, s.parsed, record)
    return buf.getvalue()


def _writer(data: bytes) -> AvroSchema:
    """The writer schema named by the single-object header."""
    _ensure_registered()
    if len(data) < HEADER_LEN or data[:2] != MAGIC:
        raise InvalidEvent("not Avro single-object encoded", reason_code="bad_header")
    writer = _WRITERS.get(data[2:HEADER_LEN])
    if writer is None:
        raise UnknownSchema(
            "writer schema fingerprint unknown",
            reason_code="unknown_schema",
            fingerprint=data[2:HEADER_LEN].hex(),
        )
    return writer


def writer_name(data: bytes) -> str:
    """The record name of the writer schema of single-object bytes (for topics that carry
    more than one record type, like ctx.records with ContextEvent and ControlEvent)."""
    return _writer(data).name


def decode(file_name: str, data: bytes) -> dict[str, Any]:
    """Decode single-object bytes into a dict of the reader schema ``file_name``."""
    writer = _writer(data)
    reader = schema(file_name)
    if writer.name != reader.name:
        raise InvalidEvent(
            f"expected {reader.name}, got {writer.name}", reason_code="wrong_record_type"
        )
    try:
        # return_record_name(+override): a union of several records decodes to
        # (name, value) so the branch is explicit; ["null", Rec] stays a plain value.
        # Same fingerprint: skip schema resolution, it costs more than the decode itself.
        resolve_to = None if writer is reader else reader.parsed
        body = io.BytesIO(data[HEADER_LEN:])
        out = fastavro.schemaless_reader(
            body,
            writer.parsed,
            resolve_to,
            return_record_name=True,
            return_record_name_override=True,
        )
    except Exception as exc:  # fastavro raises many types for truncated/garbled bodies
        raise InvalidEvent(f"Avro body does not decode: {exc}", reason_code="bad_body") from exc
    if not isinstance(out, dict):
        raise InvalidEvent("Avro body is not a record", reason_code="bad_body")
    if body.tell() != len(data) - HEADER_LEN:
        # Trailing bytes mean a framing error upstream: accepting them would hide it.
        raise InvalidEvent("trailing bytes after the Avro body", reason_code="bad_body")
    return out
