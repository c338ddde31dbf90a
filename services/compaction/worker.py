"""The compaction service's job handler (R11, R15.3): select → segment → summarize →
validate → save the candidate → publish the outcome to the session's partition.

The session processor, not this service, commits the result (R11.6). The candidate is
saved in ``compaction_operations`` before anything is published, so a crash after the
model returned resumes from the saved candidate with no second model call.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass

import asyncpg
from aiokafka import AIOKafkaProducer

from schemas.wire import CompactionOutcome, CompactionRequest, ControlEvent, encode_control
from services.compaction.contracts import (
    Fact,
    SourceItem,
    SummaryDraft,
    SummaryRequest,
)
from services.compaction.gateway import InvalidSummary, SummarizerFailed, SummaryGateway
from services.compaction.hooks import AfterCompact, BeforeCompact, HookChain
from services.compaction.validate import validate_draft
from services.core.assembly import RecordView
from services.core.policy import validate_policy
from services.core.redaction import redact
from services.core.selection import Group, Segment, build_groups, segment, select_prefix
from services.core.tokens import CachedCounter
from storage import compaction as repo
from storage.threads import inherited_records, snapshot_boundary, thread_records

log = logging.getLogger("agentloom.compaction")
OVERSIZED_CHARS = 2_000  # an oversized group's records are shown clipped, by reference
THREAD_CACHE = 64  # threads whose views stay cached between jobs


@dataclass(frozen=True)
class WorkerConfig:
    topic_records: str
    segment_tokens: int
    output_tokens: int
    call_timeout_s: float
    crash_after_save: bool = False  # fault injection for the recovery tests only


class CompactionWorker:
    def __init__(
        self,
        pool: asyncpg.Pool,
        producer: AIOKafkaProducer,
        gateway: SummaryGateway,
        counter: CachedCounter,
        config: WorkerConfig,
        hooks: HookChain | None = None,
    ) -> None:
        self.hooks = hooks or HookChain()
        # (session, run, instance) -> (view records, watermark read up to); insertion
        # order doubles as LRU order.
        self._threads: dict[tuple[str, str, str], tuple[list[RecordView], int, str]] = {}
        self.pool = pool
        self.producer = producer
        self.gateway = gateway
        self.counter = counter
        self.config = config

    async def handle(self, req: CompactionRequest) -> CompactionOutcome:
        saved = await self.pool.fetchval(
            "SELECT outcome FROM compaction_operations WHERE job_id=$1", req.job_id
        )
        if saved is not None:
            # R15.3: the model already answered for this job; republish, never regenerate.
            log.info("job %s: republishing the saved outcome (no model call)", req.job_id)
            await self._publish(req, saved)
            return _outcome_of(saved)
        t0 = time.perf_counter()
        outcome = await self._run(req)
        outcome = CompactionOutcome(
            **{**outcome.__dict__, "elapsed_ms": (time.perf_counter() - t0) * 1000}
        )
        data = encode_control(
            ControlEvent(
                f"outcome:{req.job_id}",
                req.session_id,
                req.run_id,
                req.instance_id,
                int(time.time() * 1000),
                outcome,
            )
        )
        stored = await self.pool.fetchval(
            "INSERT INTO compaction_operations (job_id, status, stage, outcome,"
            " model_operation_id, model_calls, error) VALUES ($1,$2,$3,$4,$5,$6,$7)"
            " ON CONFLICT (job_id) DO NOTHING RETURNING outcome",
            req.job_id,
            "candidate_saved" if outcome.status == "succeeded" else outcome.status,
            outcome.stage,
            data,
            outcome.model_operation_id,
            outcome.model_calls,
            outcome.reason,
        )
        if stored is None:
            # Another delivery of this job saved its candidate first: publish that one, so
            # the committed summary is the saved candidate (R15.1 audit link).
            data = await self.pool.fetchval(
                "SELECT outcome FROM compaction_operations WHERE job_id=$1", req.job_id
            )
            outcome = _outcome_of(data)
        if self.config.crash_after_save:
            log.critical("fault injection: exiting after saving the candidate of %s", req.job_id)
            logging.shutdown()
            os._exit(137)
        await self._publish(req, data)
        log.info(
            "job %s: %s at %s (%s) calls=%d covered=%d tokens -> summary %d tokens",
            req.job_id,
            outcome.status,
            outcome.stage,
            outcome.reason,
            outcome.model_calls,
            outcome.covered_tokens,
            outcome.summary_tokens,
        )
        return outcome

    async def _publish(self, req: CompactionRequest, data: bytes) -> None:
        await self.producer.send_and_wait(
            self.config.topic_records, data, key=req.session_id.encode()
        )

    async def _run(self, req: CompactionRequest) -> CompactionOutcome:
        def failed(
            stage: str, reason: str, calls: int = 0, status: str = "failed"
        ) -> CompactionOutcome:
            return CompactionOutcome(
                req.job_id,
                status,
                stage,
                reason,
                parent_summary_id=req.parent_summary_id,
                model_calls=calls,
            )

        async with self.pool.acquire() as conn:
            parent = await repo.current_summary(conn, req.parent_summary_id)
            records = await self._records(conn, req)
            policy_raw = await conn.fetchval(
                "SELECT r.context_policy FROM sessions s JOIN releases r USING (release_id)"
                " WHERE s.session_id=$1",
                req.session_id,
            )
        keep_recent = validate_policy(policy_raw).recent_complete_groups
        output_tokens = self.config.output_tokens
        covered_before = set(parent["covered_record_ids"]) if parent else set()
        records = [r for r in records if r.record_id not in covered_before]
        # Active skills are not pinned: once their load group is summarized, the assembler
        # re-provides the instruction from the same revision, exactly once (R11.1, R12.3).
        pinned: frozenset[str] = frozenset()
        groups = build_groups(records)
        selection = select_prefix(groups, keep_recent=keep_recent, pinned=pinned)
        if selection.covered and self.hooks.hooks:
            try:
                before = await self.hooks.before(
                    BeforeCompact(
                        req.session_id,
                        req.run_id,
                        tuple(i for g in selection.covered for i in g.record_ids),
                        req.trigger_reasons,
                    )
                )
            except Exception as exc:  # a hook's failure never changes the view
                return failed("hooks", f"compact_before_failed:{type(exc).__name__}")
            selection = select_prefix(
                groups, keep_recent=keep_recent, pinned=pinned | before.keep_record_ids
            )
            if before.max_output_tokens:
                output_tokens = min(output_tokens, before.max_output_tokens)
        if not selection.covered:
            return failed(
                "select", selection.deferral_reason or "nothing_compressible", status="deferred"
            )
        segments = segment(selection.covered, self.config.segment_tokens)
        # R11.3: bounded calls. Cover only the segments we may summarize; the rest stays
        # verbatim for a later job.
        segments = segments[: max(1, req.max_calls)]
        by_id = {r.record_id: r for r in records}
        drafts: list[SummaryDraft] = []
        calls = 0
        op_id = f"{req.job_id}:model"
        previous = parent["summary_text"] if parent else None
        for i, seg in enumerate(segments):
            items = _items(seg, by_id)
            calls += 1
            try:
                result = await asyncio.wait_for(
                    self.gateway.summarize(
                        SummaryRequest(items, previous, output_tokens, f"{op_id}:{i}")
                    ),
                    self.config.call_timeout_s,
                )
                validate_draft(
                    result.draft,
                    frozenset(i.record_id for i in items),
                    output_tokens * 6,
                )
            except InvalidSummary as exc:
                return failed("validate", f"invalid_summary:{exc.details.get('reason')}", calls)
            except (SummarizerFailed, TimeoutError) as exc:
                return failed("summarize", getattr(exc, "code", "summarizer_timeout"), calls)
            drafts.append(result.draft)
        covered: list[Group] = [g for s in segments for g in s.groups]
        merged = _merge(parent["summary"] if parent else None, drafts)
        if self.hooks.hooks:
            try:
                merged = await self.hooks.after(AfterCompact(req.session_id, req.run_id, merged))
            except InvalidSummary as exc:
                return failed("hooks", f"invalid_summary:{exc.details.get('reason')}", calls)
            except Exception as exc:
                return failed("hooks", f"compact_after_failed:{type(exc).__name__}", calls)
        text = merged.text()
        new_ids = [i for g in covered for i in g.record_ids]
        covered_tokens = sum(g.tokens for g in covered) + (
            parent["summary_tokens"] if parent else 0
        )
        ranges = _ranges(covered, parent)
        return CompactionOutcome(
            job_id=req.job_id,
            status="succeeded",
            stage="save",
            summary_id=f"sum_{uuid.uuid4().hex[:16]}",
            parent_summary_id=req.parent_summary_id,
            summary_json=json.dumps({"draft": merged.to_dict(), "text": text}),
            covered_ranges=ranges,
            covered_record_ids=tuple(sorted(covered_before | set(new_ids))),
            source_watermark=max(g.last_sequence for g in covered),
            summary_tokens=self.counter.count(text),
            covered_tokens=covered_tokens,
            model_operation_id=op_id,
            model_calls=calls,
        )

    async def _records(self, conn: asyncpg.Connection, req: CompactionRequest) -> list[RecordView]:
        """The job's view up to its watermark. A thread's view only grows (the inherited
        part is fixed by the run's snapshot), so a per-thread cache is extended with the
        records committed since the previous job instead of being read again."""
        key = (req.session_id, req.run_id, req.instance_id)
        cached = self._threads.pop(key, None)
        # A revocation rewrites past records (withdrawn content): never reuse text read
        # before it.
        epoch = await repo.revocation_epoch(conn, req.session_id)
        if cached is None or cached[1] > req.view_watermark or cached[2] != epoch:
            through = await snapshot_boundary(conn, req.session_id, req.run_id)
            main = await conn.fetchval(
                "SELECT main_instance_id FROM runs WHERE session_id=$1 AND run_id=$2",
                req.session_id,
                req.run_id,
            )
            # A child thread summarizes its own records only (R13.1); the background its
            # parent transferred stays the parent's.
            records = (
                await inherited_records(conn, req.session_id, through)
                if main == req.instance_id
                else []
            )
            cached = (records, through, epoch)
        records, seen, _ = cached
        records = records + await thread_records(
            conn, req.session_id, req.run_id, req.instance_id, seen, req.view_watermark
        )
        self._threads[key] = (records, req.view_watermark, epoch)
        while len(self._threads) > THREAD_CACHE:
            self._threads.pop(next(iter(self._threads)))
        return records


_ROLES = {
    "user_input": "user",
    "supplement": "user",
    "assistant_message": "assistant",
    "tool_outcome": "tool",
}


def _items(seg: Segment, by_id: dict[str, RecordView]) -> tuple[SourceItem, ...]:
    out = []
    for g in seg.groups:
        for rid in g.record_ids:
            r = by_id[rid]
            text, _ = redact(r.text)  # R15.4: no credential reaches the summarizer
            if seg.oversized and len(text) > OVERSIZED_CHARS:
                # R11.2: an oversized group is externalized first — its full content
                # stays in the store, readable by record id; the request sees a clip.
                text = (
                    f"{text[:OVERSIZED_CHARS]}… [externalized: full content in record"
                    f" {rid}, {len(r.text)} chars]"
                )
            p = r.payload
            role = _ROLES.get(r.kind, "system")
            calls = p.get("tool_calls") or []
            out.append(
                SourceItem(
                    r.record_id,
                    r.session_sequence,
                    r.kind,
                    role,
                    text,
                    tool_name=p.get("name"),
                    tool_status=p.get("status"),
                    call_id=p.get("call_id") or (calls[0]["call_id"] if calls else None),
                )
            )
    return tuple(out)


def _merge(parent: dict[str, object] | None, drafts: list[SummaryDraft]) -> SummaryDraft:
    """The new revision carries the parent's content forward (covered records are not
    summarized again, R11.8) and appends what the new segments add."""
    parts = ([SummaryDraft.from_dict(parent)] if parent else []) + drafts

    def cat(name: str) -> tuple[Fact, ...]:
        return tuple(f for d in parts for f in getattr(d, name))

    return SummaryDraft(
        verified_facts=cat("verified_facts"),
        decisions=cat("decisions"),
        failures=cat("failures"),
        unresolved_questions=cat("unresolved_questions"),
        work_artifact_refs=tuple(dict.fromkeys(r for d in parts for r in d.work_artifact_refs)),
        observations=tuple(o for d in parts for o in d.observations),
    )


def _ranges(covered: list[Group], parent: asyncpg.Record | None) -> tuple[tuple[int, int], ...]:
    spans = sorted(
        [(g.first_sequence, g.last_sequence) for g in covered]
        + [tuple(r) for r in (parent["covered_ranges"] if parent else [])]
    )
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def _outcome_of(data: bytes) -> CompactionOutcome:
    from schemas.wire import decode_control

    body = decode_control(data).body
    assert isinstance(body, CompactionOutcome)
    return body
