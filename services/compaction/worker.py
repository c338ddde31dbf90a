"""The compaction service's job handler (R11, R15.3): select → segment → summarize →
validate → save the candidate → publish the outcome to the session's partition.

The session processor, not this service, commits the result (R11.6). The candidate is
saved in ``compaction_operations`` before anything is published, so a crash after the
model returned resumes from the saved candidate with no second model call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass

import asyncpg
from aiokafka import AIOKafkaProducer

from domain.policy import validate_policy
from domain.redaction import redact
from domain.rendering import RecordView
from domain.selection import (
    Group,
    Segment,
    build_groups,
    current_task_ids,
    segment,
    select_prefix,
)
from domain.tokens import CachedCounter
from schemas.wire import CompactionOutcome, CompactionRequest, ControlEvent, encode_control
from services.compaction.bound import (
    ARTIFACTS_KEPT,
    MIN_BOUND,
    chunk,
    concat,
    fit_draft,
    rollup_items,
    summary_bound,
)
from services.compaction.compact_hooks import AfterCompact, BeforeCompact, HookChain
from services.compaction.drafts import (
    SourceItem,
    SummaryDraft,
    SummaryRequest,
)
from services.compaction.errors import InvalidSummary, SummarizerFailed
from services.compaction.gateway import SummaryGateway
from services.compaction.validate import check_coverage, validate_draft
from storage import compaction as repo
from storage.threads import inherited_records, snapshot_boundary, thread_records

log = logging.getLogger("agentloom.compaction")
OVERSIZED_CHARS = 2_000  # an oversized group's records are shown clipped, by reference
CHARS_PER_TOKEN = 4  # to clip an old, unbounded parent summary before it is sent
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
        policy = validate_policy(policy_raw)
        keep_recent = policy.recent_complete_groups
        # R11.2/R11.8: the effective summary is bounded; a segment's draft never needs
        # more than the whole bound.
        bound = summary_bound(policy.compaction.summary_max_ratio, req.input_budget)
        output_tokens = min(self.config.output_tokens, bound)
        covered_before = set(parent["covered_record_ids"]) if parent else set()
        records = [r for r in records if r.record_id not in covered_before]
        # R4.4/R10.1/R11.1: the current task (the run's question and its supplements) is
        # required — never summarized. Active skills are not pinned: once their load group
        # is summarized, the assembler re-provides the instruction from the same revision,
        # exactly once (R12.3).
        pinned = current_task_ids(records, req.run_id)
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
        # The previous summary is context for the summarizer; it is bounded like every
        # summary (R11.2), and an old unbounded one is clipped, never sent whole.
        previous = parent["summary_text"][: bound * CHARS_PER_TOKEN] if parent else None
        for i, seg in enumerate(segments):
            items = _items(seg, by_id)
            calls += 1
            try:
                draft = await self._summarize(
                    SummaryRequest(items, previous, output_tokens, f"{op_id}:{i}")
                )
            except InvalidSummary as exc:
                return failed("validate", f"invalid_summary:{exc.details.get('reason')}", calls)
            except (SummarizerFailed, TimeoutError) as exc:
                return failed("summarize", getattr(exc, "code", "summarizer_timeout"), calls)
            drafts.append(draft)
        covered: list[Group] = [g for s in segments for g in s.groups]
        merged = _merge(parent["summary"] if parent else None, drafts)
        rollup: dict[str, object] | None = None
        if self.counter.count(merged.text()) > bound:
            merged, rollup_calls, rollup = await self._roll_up(
                merged, bound, op_id, req.parent_summary_id
            )
            calls += rollup_calls
        if self.hooks.hooks:
            try:
                merged = await self.hooks.after(AfterCompact(req.session_id, req.run_id, merged))
            except InvalidSummary as exc:
                return failed("hooks", f"invalid_summary:{exc.details.get('reason')}", calls)
            except Exception as exc:
                return failed("hooks", f"compact_after_failed:{type(exc).__name__}", calls)
        # The bound holds whatever a model or a hook answered (R11.2).
        merged, fitted = fit_draft(merged, bound, self.counter.count)
        if fitted:
            rollup = {**(rollup or {}), "fitted_out": fitted}
        if rollup is not None:
            rollup["entries_out"] = len(merged.all_facts())
        new_ids = [i for g in covered for i in g.record_ids]
        ranges = _ranges(covered, parent)
        try:
            # R11.4: every covered record is cited or in a covered range; every citation
            # is a record this summary covers (through its parents).
            check_coverage(
                merged,
                {i: by_id[i].session_sequence for i in new_ids},
                ranges,
                earlier=frozenset(covered_before),
            )
        except InvalidSummary as exc:
            return failed("validate", f"invalid_summary:{exc.details.get('reason')}", calls)
        text = merged.text()
        covered_tokens = sum(g.tokens for g in covered) + (
            parent["summary_tokens"] if parent else 0
        )
        new_set = set(new_ids)
        # R11.7: what the job kept verbatim on purpose (current task, recent groups,
        # pinned and unfinished groups) — referenced, not summarized.
        retained = [r.record_id for r in records if r.record_id not in new_set]
        body = {
            "draft": merged.to_dict(),
            "text": text,
            "retained_reference_ids": retained,
            "bound_tokens": bound,
            "rollup": rollup,
        }
        return CompactionOutcome(
            job_id=req.job_id,
            status="succeeded",
            stage="save",
            summary_id=f"sum_{uuid.uuid4().hex[:16]}",
            parent_summary_id=req.parent_summary_id,
            summary_json=json.dumps(body),
            covered_ranges=ranges,
            covered_record_ids=tuple(sorted(covered_before | set(new_ids))),
            source_watermark=max(g.last_sequence for g in covered),
            summary_tokens=self.counter.count(text),
            covered_tokens=covered_tokens,
            model_operation_id=op_id,
            model_calls=calls,
        )

    async def _summarize(self, req: SummaryRequest) -> SummaryDraft:
        """One bounded summarizer call (R11.3), its draft validated against the request's
        own records (R11.4). Raises InvalidSummary, SummarizerFailed or TimeoutError."""
        result = await asyncio.wait_for(self.gateway.summarize(req), self.config.call_timeout_s)
        # ~6 characters per token at most: a draft far over its output cap is refused.
        validate_draft(result.draft, req.source_ids, req.max_output_tokens * 6)
        return result.draft

    async def _roll_up(
        self, draft: SummaryDraft, bound: int, op_id: str, parent_id: str | None
    ) -> tuple[SummaryDraft, int, dict[str, object]]:
        """Hierarchical re-summarization (R11.8): the parent's entries and the new drafts
        become one summary within ``bound``. Each request holds at most one segment's
        worth of entries (R11.2). If the summarizer fails here, the deterministic fit
        still bounds the summary — a roll-up never leaves the session uncompactable."""
        items = rollup_items(draft)
        chunks = chunk(items, self.config.segment_tokens, self.counter.count)
        per_chunk = max(MIN_BOUND, bound // max(1, len(chunks)))
        parts: list[SummaryDraft] = []
        calls = 0
        error = None
        for k, part in enumerate(chunks):
            calls += 1
            try:
                parts.append(
                    await self._summarize(
                        SummaryRequest(part, None, per_chunk, f"{op_id}:rollup:{k}")
                    )
                )
            except (InvalidSummary, SummarizerFailed, TimeoutError) as exc:
                error = getattr(exc, "code", "summarizer_timeout")
                log.warning("roll-up call %d failed (%s): fitting deterministically", k, error)
                break
        rolled = concat(parts) if error is None else draft
        note = (
            f"rolled up summary {parent_id or '-'} and new segments: {len(items)} entries"
            f" condensed to fit {bound} tokens; every covered record stays readable by id"
        )
        rolled = dataclasses.replace(
            rolled,
            work_artifact_refs=tuple(draft.work_artifact_refs[-ARTIFACTS_KEPT:]),
            observations=(*rolled.observations[-3:], note),
        )
        info: dict[str, object] = {
            "calls": calls,
            "entries_in": len(items),
            "entries_out": len(rolled.all_facts()),
            "requests": len(chunks),
            "error": error,
        }
        return rolled, calls, info

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
            role = _ROLES.get(r.kind, "user")  # R3.3: never system
            calls = p.get("tool_calls") or []
            # The calls' names and arguments: a file that was only read is named there.
            # Redacted and clipped like the text (R15.4, R11.2).
            specs = [p] if r.kind == "tool_call" else calls
            arguments = tuple(
                (str(c.get("name") or ""), redact(str(c.get("arguments_json") or ""))[0])
                for c in specs
                if c.get("name") or c.get("arguments_json")
            )
            if seg.oversized:
                arguments = tuple((n, a[:OVERSIZED_CHARS]) for n, a in arguments)
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
                    arguments=arguments,
                )
            )
    return tuple(out)


def _merge(parent: dict[str, object] | None, drafts: list[SummaryDraft]) -> SummaryDraft:
    """The new revision carries the parent's content forward (covered records are not
    summarized again, R11.8) and appends what the new segments add; the bound is applied
    afterwards (roll-up, fit)."""
    return concat(([SummaryDraft.from_dict(parent)] if parent else []) + drafts)


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
