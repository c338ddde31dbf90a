"""What the session processor publishes: encoded while the transaction that earns it
is still open (an encoding error rolls it back instead of following a commit), and
sent only once it committed."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from domain.planning.state import SCOPE_MISMATCH, BatchPlan, Incoming, NewRecord, Rejection
from schemas.contracts import built
from schemas.wire import (
    CommittedRecord,
    CompactionRequest,
    DeadLetter,
    ObservabilityEvent,
    encode_committed,
    encode_compaction_request,
    encode_dead_letter,
    encode_observability,
    fit_dead_letter,
)
from storage.records.session_states import ExistingRecord
from streams.kafka.publish import Message

log = logging.getLogger("agentloom.processor")


@dataclass(frozen=True)
class ProcessorConfig:
    consumer: str
    topic_records: str
    topic_committed: str
    topic_dead_letter: str
    topic_compaction_requests: str = "ctx.compaction.requests"
    topic_observability: str = "ctx.observability"
    # A batch is applied in chunks of this many messages, each chunk's transaction
    # overlapping the next one's decoding (processor.handle); one transaction per chunk.
    pipeline_chunk: int = 500


@dataclass
class Effects:
    """What a batch's transactions produced, published only after they committed: the
    value the processor's *transact* step returns and its *publish* step sends (committed
    records, then dead letters, then observability and compaction requests)."""

    committed: list[Message] = field(default_factory=list)
    other: list[Message] = field(default_factory=list)  # observability, compaction requests
    dead: list[DeadLetter] = field(default_factory=list)
    records: int = 0
    duplicates: int = 0
    rejected: int = 0
    isolated: int = 0  # records no transaction could apply (dead-lettered)
    codes: dict[str, int] = field(default_factory=dict)

    def add(self, other: Effects) -> None:
        """Append ``other`` (a later part of the same batch)."""
        self.committed += other.committed
        self.other += other.other
        self.dead += other.dead
        self.records += other.records
        self.duplicates += other.duplicates
        self.rejected += other.rejected
        self.isolated += other.isolated
        self.count(other.codes)

    def count(self, codes: dict[str, int]) -> None:
        for code, n in codes.items():
            self.codes[code] = self.codes.get(code, 0) + n


def dead_letter(
    config: ProcessorConfig,
    partition: int,
    offset: int,
    code: str,
    reason: str,
    session_id: str | None,
    event_key: str | None,
    key: bytes | None = None,
    value: bytes | None = None,
    space_id: str | None = None,
) -> DeadLetter:
    """A dead letter of the records topic (without ``value``, the processor adds the
    original bytes when it sends it). ``space_id``: the space of the message's verified
    signer, which analytics counts it under (``domain.rollup.attributed``)."""
    return DeadLetter(
        reason_code=code,
        reason=reason,
        source_topic=config.topic_records,
        source_partition=partition,
        source_offset=offset,
        key=key,
        value=value,
        session_id=session_id,
        event_key=event_key,
        failed_at_ms=int(time.time() * 1000),
        space_id=space_id,
    )


def encode_applied(
    config: ProcessorConfig,
    plan: BatchPlan,
    existing: dict[tuple[str, str], ExistingRecord],
    notes: list[ObservabilityEvent],
    requests: list[CompactionRequest],
) -> Effects:
    """Encode what a transaction produced, while it is still open."""
    out = Effects(records=len(plan.records), duplicates=len(plan.duplicates))
    now = int(time.time() * 1000)
    out.committed += [_committed(config, _new_record(nr, now)) for nr in plan.records]
    for inc in plan.duplicates:
        # Republish: the first attempt may have crashed between the database commit
        # and this publish. The committed topic is at-least-once; consumers dedupe
        # on record_id.
        old = existing.get((inc.event.scope.session_id, inc.event.event_key))
        if old is not None:
            # ExistingRecord holds exactly the committed fields; add when/where.
            again = CommittedRecord(
                **old.__dict__,
                committed_at_ms=now,
                source_partition=inc.partition,
                source_offset=inc.offset,
            )
            out.committed.append(_committed(config, again))
    for rej in plan.rejections:
        if rej.dead_letter:
            out.dead.append(_letter(config, rej))
        else:
            out.rejected += 1
        out.codes[rej.code] = out.codes.get(rej.code, 0) + 1
    # Published again; their codes were counted when they were refused.
    out.dead += [_letter(config, rej) for rej in plan.letters_again]
    notes += [_conflict_note(nr, now) for nr in plan.records if nr.revision_conflict]
    notes += [_hit_note(inc, now) for inc in plan.duplicates]  # R18 idempotent hits
    for note in notes:
        value = encode_observability(note)
        out.other.append((config.topic_observability, note.session_id.encode(), value))
    for req in requests:
        value = encode_compaction_request(req)
        out.other.append((config.topic_compaction_requests, req.session_id.encode(), value))
    return out


def _letter(config: ProcessorConfig, rej: Rejection) -> DeadLetter:
    ev = rej.incoming.event
    # The letter is the signer's (the event's space, which admission checked against the
    # signing key), never that of a session of another space it named.
    sid = None if rej.code == SCOPE_MISMATCH else ev.scope.session_id
    return dead_letter(
        config,
        rej.incoming.partition,
        rej.incoming.offset,
        rej.code,
        rej.message,
        sid,
        ev.event_key,
        space_id=ev.scope.space_id,
    )


def _new_record(nr: NewRecord, now: int) -> CommittedRecord:
    ev, inc = nr.incoming.event, nr.incoming
    scope = ev.scope
    return built(  # every field, by name (a test compares with CommittedRecord(...))
        CommittedRecord,
        {
            "record_id": nr.record_id,
            "session_id": scope.session_id,
            "session_sequence": nr.session_sequence,
            "run_id": scope.run_id,
            "instance_id": scope.instance_id,
            "instance_sequence": nr.instance_sequence,
            "event_key": ev.event_key,
            "kind": str(ev.kind),
            "token_count": inc.token_count,
            "token_method": inc.token_method,
            "content_sha256": ev.content.sha256,
            "committed_at_ms": now,
            "source_partition": inc.partition,
            "source_offset": inc.offset,
        },
    )


def _conflict_note(nr: NewRecord, now: int) -> ObservabilityEvent:
    ev = nr.incoming.event
    return ObservabilityEvent(
        "revision_conflict",
        ev.scope.session_id,
        ev.scope.run_id or "",
        ev.scope.instance_id or "",
        now,
        "",
        decision="appended",
        values={
            "expected_revision": float(ev.expected_revision or 0),
            "thread_revision": float((nr.instance_sequence or 1) - 1),
        },
    )


def _hit_note(inc: Incoming, now: int) -> ObservabilityEvent:
    """A redelivered or retried record that was already committed (R18: ids only)."""
    ev = inc.event
    scope = ev.scope
    return ObservabilityEvent(
        "idempotent_hit", scope.session_id, scope.run_id or "", scope.instance_id or "",
        now, "", reason=str(ev.kind), counts={"hits": 1},
    )  # fmt: skip


def dead_letter_note(dl: DeadLetter) -> ObservabilityEvent:
    """A dead letter by reason code, for analytics beside the dead-letter topic (R18)."""
    return ObservabilityEvent(
        "dead_letter", dl.session_id or "", "", "", dl.failed_at_ms, "", reason=dl.reason_code,
        space_id=dl.space_id,
    )  # fmt: skip


def _committed(config: ProcessorConfig, rec: CommittedRecord) -> Message:
    return (config.topic_committed, rec.session_id.encode(), encode_committed(rec))


def messages(
    config: ProcessorConfig,
    effects: Effects,
    originals: Mapping[tuple[int, int], tuple[bytes | None, bytes | None]],
) -> list[Message]:
    """Everything ``effects`` publishes, in order: the committed records, each dead letter
    with the original key and value of its (partition, offset) in ``originals`` and its
    note, then the rest."""
    out: list[Message] = list(effects.committed)
    for dl in effects.dead:
        raw = originals.get((dl.source_partition, dl.source_offset))
        if raw is not None and dl.value is None:
            dl = replace(dl, key=raw[0], value=raw[1])
        # Cut to what the producer accepts: a ~1 MB original must not stall us.
        dl = fit_dead_letter(dl)
        out.append((config.topic_dead_letter, dl.key, encode_dead_letter(dl)))
        note = encode_observability(dead_letter_note(dl))  # R18: by reason, for analytics
        out.append((config.topic_observability, dl.key, note))
        log.warning(
            "dead letter %s at %s:%d: %s",
            dl.reason_code,
            config.topic_records,
            dl.source_offset,
            dl.reason[:300],
        )
    return out + effects.other
