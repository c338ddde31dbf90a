"""Typed encode/decode for every topic: the only place topics meet bytes."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from typing import Any

from schemas import codec
from schemas.contracts import ContextEvent
from schemas.errors import InvalidEvent


def encode_event(event: ContextEvent) -> bytes:
    return codec.encode(codec.CONTEXT_EVENT, event.to_avro())


def decode_event(data: bytes) -> ContextEvent:
    return decode_event_and_payload(data)[0]


def decode_event_and_payload(data: bytes) -> tuple[ContextEvent, dict[str, Any]]:
    """The event, and its payload as the decoder read it: ``to_wire(event.payload)``,
    which the processor stores, without walking the payload again (a test pins the
    equality for every payload type)."""
    raw = codec.decode(codec.CONTEXT_EVENT, data)
    try:
        return ContextEvent.from_avro(raw), raw["payload"][1]
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
    # Who signed the refused message (its space), when the processor verified it:
    # analytics counts the letter there, never under a session of another space.
    space_id: str | None = None


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


# A producer refuses a message over its max.request.size (aiokafka 1 MiB, faust
# 1,000,000 bytes): a dead letter carrying a ~1 MB original must be cut, or the
# process that cannot publish it stalls its partition. Headroom for Kafka's framing.
DEAD_LETTER_MAX_BYTES = 900_000
MAX_REASON_CHARS = 2000
_TRUNCATED = re.compile(r"\[(key|value) truncated to (\d+) of (\d+) bytes, sha256 ([0-9a-f]{64})\]")


def fit_dead_letter(dl: DeadLetter, max_bytes: int = DEAD_LETTER_MAX_BYTES) -> DeadLetter:
    """``dl`` made publishable: the reason capped at ``MAX_REASON_CHARS``; when the
    encoded letter would exceed ``max_bytes``, the original key and value are cut to a
    prefix and the reason names each original's size and sha256 (``truncated_original``
    reads them back). The original stays in its source topic at the recorded offset."""
    reason = dl.reason if len(dl.reason) <= MAX_REASON_CHARS else dl.reason[:MAX_REASON_CHARS] + "…"
    dl = replace(dl, reason=reason)
    key, value = dl.key or b"", dl.value or b""
    bare = len(encode_dead_letter(replace(dl, key=None, value=None)))
    room = max_bytes - bare - 400  # the notes below, and varint lengths
    if len(key) + len(value) <= room:
        return dl
    notes: list[str] = []
    kept_key = dl.key
    if len(key) > room // 2:
        kept_key = key[: room // 2]
        notes.append(_note("key", key, len(kept_key)))
    kept_value = value[: max(0, room - len(kept_key or b""))]
    notes.append(_note("value", value, len(kept_value)))
    return replace(dl, key=kept_key, value=kept_value, reason=f"{reason} {' '.join(notes)}")


def _note(what: str, original: bytes, kept: int) -> str:
    digest = hashlib.sha256(original).hexdigest()
    return f"[{what} truncated to {kept} of {len(original)} bytes, sha256 {digest}]"


def truncated_original(dl: DeadLetter, what: str = "value") -> tuple[int, str] | None:
    """(size, sha256) of the original ``what`` ("key" or "value") when ``fit_dead_letter``
    cut it; None when the letter carries it whole."""
    for m in _TRUNCATED.finditer(dl.reason):
        if m.group(1) == what:
            return int(m.group(3)), m.group(4)
    return None


# --- control events (ctx.records) and compaction requests ---------------------------


@dataclass(frozen=True)
class BudgetObservation:
    estimated_input: int
    input_budget: int
    required_tokens: int
    fixed_overhead: int
    compressible_tokens: int
    view_watermark: int
    summary_id: str | None
    fingerprint: str
    policy_revision: str
    # Nothing compressible because a tool call is still in flight (R9.4): its deferral
    # names it, ``open_call_in_flight:<call id>`` (domain.context.selection).
    held_by: str | None = None
    # The largest group of the observed view: the most one step grew it (measured when a
    # trigger fired; 0 otherwise). A no_gain deferral must leave room for another.
    largest_step_tokens: int = 0
    # The prompt cache as the observer saw it (``cache_expired``): the time since the
    # session's last model call and the model's cache lifetime; None when not measured.
    idle_ms: int | None = None
    cache_ttl_ms: int | None = None


@dataclass(frozen=True)
class CompactionOutcome:
    job_id: str
    status: str  # succeeded | failed | deferred
    stage: str
    reason: str | None = None
    summary_id: str | None = None
    parent_summary_id: str | None = None
    summary_json: str | None = None
    covered_ranges: tuple[tuple[int, int], ...] = ()
    covered_record_ids: tuple[str, ...] = ()
    source_watermark: int = 0
    summary_tokens: int = 0
    covered_tokens: int = 0
    model_operation_id: str | None = None
    model_calls: int = 0
    elapsed_ms: float = 0.0


ControlBody = BudgetObservation | CompactionOutcome
_CONTROL_NAMES = {
    BudgetObservation: "agentloom.context.v1.BudgetObservation",
    CompactionOutcome: "agentloom.context.v1.CompactionOutcome",
}


@dataclass(frozen=True)
class ControlEvent:
    event_key: str
    session_id: str
    run_id: str
    instance_id: str
    occurred_at_ms: int
    body: ControlBody


def encode_control(ev: ControlEvent) -> bytes:
    body = dict(ev.body.__dict__)
    if isinstance(ev.body, CompactionOutcome):
        body["covered_ranges"] = [list(r) for r in ev.body.covered_ranges]
        body["covered_record_ids"] = list(ev.body.covered_record_ids)
    rec = {**ev.__dict__, "body": (_CONTROL_NAMES[type(ev.body)], body)}
    return codec.encode(codec.CONTROL_EVENT, rec)


def decode_control(data: bytes) -> ControlEvent:
    raw = codec.decode(codec.CONTROL_EVENT, data)
    name, body = raw.pop("body")
    parsed: ControlBody
    if name.endswith("BudgetObservation"):
        parsed = BudgetObservation(**body)
    else:
        body["covered_ranges"] = tuple((int(a), int(b)) for a, b in body["covered_ranges"])
        body["covered_record_ids"] = tuple(body["covered_record_ids"])
        parsed = CompactionOutcome(**body)
    return ControlEvent(**raw, body=parsed)


@dataclass(frozen=True)
class CompactionRequest:
    job_id: str
    session_id: str
    run_id: str
    instance_id: str
    view_watermark: int
    parent_summary_id: str | None
    policy_revision: str
    task_version: int
    trigger_reasons: tuple[str, ...]
    budget_before: int
    input_budget: int
    target_tokens: int
    max_calls: int
    requested_at_ms: int
    plan_version: int = 0  # the thread's plan when the job started
    constraints_version: int = 0  # and its constraint records


def encode_compaction_request(req: CompactionRequest) -> bytes:
    return codec.encode(
        codec.COMPACTION_REQUEST, {**req.__dict__, "trigger_reasons": list(req.trigger_reasons)}
    )


def decode_compaction_request(data: bytes) -> CompactionRequest:
    raw = codec.decode(codec.COMPACTION_REQUEST, data)
    raw["trigger_reasons"] = tuple(raw["trigger_reasons"])
    return CompactionRequest(**raw)


@dataclass(frozen=True)
class ObservabilityEvent:
    kind: (
        str  # trigger_check | compaction_finished | prepare_budget | revision_conflict | model_call
        # | idempotent_hit | dead_letter | readback
    )
    session_id: str
    run_id: str
    instance_id: str
    occurred_at_ms: int
    policy_revision: str
    purpose: str | None = None
    decision: str | None = None
    reason: str | None = None
    fired: tuple[str, ...] = ()
    values: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    budget_items: dict[str, int] = field(default_factory=dict)
    job_id: str | None = None
    stage: str | None = None
    input_budget: int | None = None
    estimated_input: int | None = None
    budget_before: int | None = None
    budget_after: int | None = None
    target_reached: bool | None = None
    summary_tokens: int | None = None
    covered_tokens: int | None = None
    model_calls: int | None = None
    elapsed_ms: float | None = None
    counting_method: str | None = None
    counts: dict[str, int] = field(default_factory=dict)  # decision counts, idempotent hits
    record_id: str | None = None  # readback
    read_offset: int | None = None
    read_size: int | None = None
    cost_picos: int | None = None  # model_call: exact cost, 1e-12 of the currency unit
    currency: str | None = None  # model_call: of cost_picos
    space_id: str | None = None  # dead_letter: the refused message's signer's space


def encode_observability(ev: ObservabilityEvent) -> bytes:
    rec = dict(ev.__dict__)
    rec["fired"] = list(ev.fired)
    rec["values"] = {k: float(v) for k, v in ev.values.items()}
    rec["thresholds"] = {k: float(v) for k, v in ev.thresholds.items()}
    return codec.encode(codec.OBSERVABILITY_EVENT, rec)


def decode_observability(data: bytes) -> ObservabilityEvent:
    raw = codec.decode(codec.OBSERVABILITY_EVENT, data)
    raw["fired"] = tuple(raw["fired"])
    return ObservabilityEvent(**raw)
