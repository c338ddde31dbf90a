"""Typed encode/decode for every topic: the only place topics meet bytes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import codec
from schemas.contracts import ContextEvent
from schemas.errors import InvalidEvent


def encode_event(event: ContextEvent) -> bytes:
    return codec.encode(codec.CONTEXT_EVENT, event.to_avro())


def decode_event(data: bytes) -> ContextEvent:
    raw = codec.decode(codec.CONTEXT_EVENT, data)
    try:
        return ContextEvent.from_avro(raw)
    except (KeyError, ValueError, TypeError) as exc:
        raise InvalidEvent(
            f"event does not map to the contract: {exc}", reason_code="bad_body"
        ) from exc


@dataclass(frozen=True)
class CommittedRecord:
    record_id: str
    session_id: str
    session_sequence: int
    run_id: str | None
    instance_id: str | None
    instance_sequence: int | None
    event_key: str
    kind: str
    token_count: int
    token_method: str
    content_sha256: str
    committed_at_ms: int
    source_partition: int
    source_offset: int


@dataclass(frozen=True)
class DeadLetter:
    reason_code: str
    reason: str
    source_topic: str
    source_partition: int
    source_offset: int
    key: bytes | None
    value: bytes | None
    session_id: str | None
    event_key: str | None
    failed_at_ms: int


def _encode_flat(file_name: str, obj: Any) -> bytes:
    # Flat records: the instance dict is the Avro record. (dataclasses.asdict deep-copies
    # every value and cost more than the Avro encoding itself on the ingest hot path.)
    return codec.encode(file_name, obj.__dict__)


def encode_committed(rec: CommittedRecord) -> bytes:
    return _encode_flat(codec.COMMITTED_RECORD, rec)


def decode_committed(data: bytes) -> CommittedRecord:
    return CommittedRecord(**codec.decode(codec.COMMITTED_RECORD, data))


def encode_dead_letter(dl: DeadLetter) -> bytes:
    return _encode_flat(codec.DEAD_LETTER, dl)


def decode_dead_letter(data: bytes) -> DeadLetter:
    return DeadLetter(**codec.decode(codec.DEAD_LETTER, data))
