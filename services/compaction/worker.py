"""The compaction service's job handler (R11, R15.3): select → segment → summarize →
validate → save the candidate → publish the outcome to the session's partition.

The session processor, not this service, commits the result (R11.6). The candidate is
saved in ``compaction_operations`` before anything is published, so a crash after the
model returned resumes from the saved candidate with no second model call.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from domain.compaction.bound import MIN_BOUND, fit_draft, summary_bound
from domain.compaction.drafts import SourceItem, SummaryDraft, SummaryRequest
from domain.compaction.errors import InvalidSummary, SummarizerFailed
from domain.compaction.gateway import SummaryGateway
from domain.compaction.sources import merge_job, merge_ranges, source_items
from domain.compaction.text_rules import apply_text_rules, summary_heading
from domain.compaction.validate import check_coverage
from domain.context.selection import (
    Group,
    Segment,
    Selection,
    build_groups,
    current_task_ids,
    segment,
    select_prefix,
)
from domain.context.tokens import CachedCounter
from domain.window.retention import retained_record_ids
from schemas.errors import HookFailed
from schemas.wire import CompactionOutcome, CompactionRequest
from services import metrics
from services.compaction.compact_hooks import (
    AFTER,
    BEFORE,
    AfterCompact,
    BeforeCompact,
    HookChain,
    failure_reason,
)
from services.compaction.costs import CostNotes, Spent
from services.compaction.job_records import AgentRequests, JobRecords
from services.compaction.job_state import JobState, Stop, invalid
from services.compaction.outcomes import outcome_event, outcome_of
from services.compaction.summarize import BoundedSummarizer
from storage.compaction.jobs import CompactionJobs, SavedOperation
from streams.kafka.publish import Publisher

log = logging.getLogger("agentloom.compaction")
CHARS_PER_TOKEN = 4  # to clip an old, unbounded parent summary before it is sent


@dataclass(frozen=True)
class WorkerConfig:
    topic_records: str
    segment_tokens: int
    output_tokens: int | None  # a summarizer call's cap; None: its share of the bound
    call_timeout_s: float
    crash_after_save: bool = False  # fault injection for the recovery tests only
    # Over its bound, re-summarize from the records what the job covers while they are
    # at most this many tokens (``_rederived``); 0: always roll the parent's entries up.
    rederive_tokens: int = 0


class CompactionWorker:
    """Handles one job at a time; ``handle`` never publishes an outcome it did not save."""

    def __init__(
        self,
        jobs: CompactionJobs,
        publisher: Publisher,
        gateway: SummaryGateway,
        counter: CachedCounter,
        config: WorkerConfig,
        hooks: HookChain | None = None,
        costs: CostNotes | None = None,
        agents: AgentRequests | None = None,  # None: never fork the agent's request
    ) -> None:
        self.jobs, self.costs, self.agents = jobs, costs, agents
        self.publisher = publisher
        self.counter = counter
        self.config = config
        self.hooks = hooks or HookChain()
        self.summarizer = BoundedSummarizer(
            gateway, counter, config.segment_tokens, config.call_timeout_s
        )
        self.views = JobRecords(jobs)

    async def handle(self, req: CompactionRequest) -> CompactionOutcome:
        saved = await self.jobs.saved_outcome(req.job_id)
        if saved is not None:
            # R15.3: the model already answered for this job; republish, never regenerate.
            log.info("job %s: republishing the saved outcome (no model call)", req.job_id)
            await self._publish(req, saved)
            metrics.COMPACTION_JOBS.labels("republished").inc()
            return outcome_of(saved)
        t0, spent = time.perf_counter(), Spent()
        outcome = await self._run(req, spent)
        outcome = dataclasses.replace(outcome, elapsed_ms=(time.perf_counter() - t0) * 1000)
        if self.costs is not None:  # before the save: a redelivery then calls no model
            await self.costs.publish(req, spent)
        data, outcome = await self._save(req, outcome)
        if self.config.crash_after_save:
            log.critical("fault injection: exiting after saving the candidate of %s", req.job_id)
            logging.shutdown()
            os._exit(137)
        await self._publish(req, data)
        metrics.COMPACTION_JOBS.labels(outcome.status).inc()
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

    async def _save(
        self, req: CompactionRequest, outcome: CompactionOutcome
    ) -> tuple[bytes, CompactionOutcome]:
        """Save before publishing. If another delivery of this job saved its candidate
        first, that one is published, so the committed summary is the saved candidate
        (R15.1 audit link)."""
        data = outcome_event(req, outcome)
        stored = await self.jobs.save_outcome(
            SavedOperation(
                req.job_id,
                "candidate_saved" if outcome.status == "succeeded" else outcome.status,
                outcome.stage,
                data,
                outcome.model_operation_id,
                outcome.model_calls,
                outcome.reason,
            )
        )
        return (data, outcome) if stored == data else (stored, outcome_of(stored))

    async def _publish(self, req: CompactionRequest, data: bytes) -> None:
        # Waited for: the request's offset is committed only after this is acknowledged.
        await self.publisher.send_and_wait(self.config.topic_records, req.session_id.encode(), data)

    async def _run(self, req: CompactionRequest, spent: Spent) -> CompactionOutcome:
        job = await self._load(req, spent)
        try:
            segments = await self._select(job)
            covered = [g for s in segments for g in s.groups]
            parent = job.parent.summary if job.parent else None
            merged = await self._merged(job, segments, parent)
            merged, rollup = await self._bounded(job, merged, covered)
            ranges = self._checked_ranges(job, merged, covered)
        except Stop as stop:
            return job.stopped(stop)
        return self._succeeded(job, merged, covered, ranges, rollup)

    async def _load(self, req: CompactionRequest, spent: Spent) -> JobState:
        parent = await self.jobs.parent_summary(req.parent_summary_id)
        before = parent.covered_record_ids if parent else frozenset()
        records = await self.views.view(req, before)  # cached per thread between jobs
        policy = await self.jobs.session_policy(req.session_id)
        bound = summary_bound(policy.compaction.summary_max_ratio, req.input_budget)
        records = [r for r in records if r.record_id not in before]
        return JobState(
            req,
            parent,
            records,
            bound,
            policy.recent_complete_groups,
            min(self.config.output_tokens or bound, bound),
            await self.jobs.current_frontier(req.session_id, req.run_id, req.instance_id),
            policy.hook_bindings,
            retained_record_ids(records, req.run_id, policy.retention_rules),
            spent,
        )

    async def _select(self, job: JobState) -> list[Segment]:
        """The segments this job summarizes (R11.1, R11.2), or ``Stop`` (deferred)."""
        # R4.4/R10.1/R11.1: the current task (the run's question and its supplements) is
        # required — never summarized. Active skills are not pinned: once their load group
        # is summarized, the assembler re-provides the instruction from the same revision,
        # exactly once (R12.3).
        pinned = current_task_ids(job.records, job.req.run_id) | job.retained
        groups = build_groups(job.records)
        selection = select_prefix(groups, keep_recent=job.keep_recent, pinned=pinned)
        if selection.covered and any(b.point == BEFORE for b in job.hooks):
            selection = await self._before_hooks(job, groups, pinned, selection)
        if not selection.covered:
            reason = selection.deferral_reason or "nothing_compressible"
            raise Stop("select", reason, status="deferred")
        segments = segment(selection.covered, self.config.segment_tokens)
        # R11.3: bounded calls. Cover only the segments we may summarize; the rest stays
        # verbatim for a later job.
        return segments[: max(1, job.req.max_calls)]

    async def _before_hooks(
        self, job: JobState, groups: list[Group], pinned: frozenset[str], selection: Selection
    ) -> Selection:
        """``context.compact.before`` (R14): may keep more records verbatim and ask for a
        tighter summary."""
        req = job.req
        candidates = tuple(i for g in selection.covered for i in g.record_ids)
        try:
            before = await self.hooks.before(
                BeforeCompact(req.session_id, req.run_id, candidates, req.trigger_reasons),
                job.hooks,
            )
        except HookFailed as exc:  # a hook's failure never changes the view
            raise Stop("hooks", failure_reason(exc, "compact_before_failed")) from exc
        except Exception as exc:  # what a hook answered could not be used
            raise Stop("hooks", f"compact_before_failed:{type(exc).__name__}") from exc
        if before.max_output_tokens:
            job.output_tokens = min(job.output_tokens, before.max_output_tokens)
        keep = pinned | before.keep_record_ids
        return select_prefix(groups, keep_recent=job.keep_recent, pinned=keep)

    async def _merged(
        self, job: JobState, segments: list[Segment], parent: Mapping[str, Any] | None
    ) -> SummaryDraft:
        """The segments summarized, merged after ``parent``'s entries (if any)."""
        drafts, items = await self._summarize_segments(job, segments, parent is not None)
        records = [job.by_id[i] for s in segments for g in s.groups for i in g.record_ids]
        return merge_job(parent, drafts, items, records)

    async def _rederived(self, job: JobState, covered: list[Group]) -> SummaryDraft | None:
        """Everything the job covers summarized again from its records, or None. A
        roll-up decides again from what earlier jobs kept (R11.8), so what one drops is
        lost at every later one; while the covered records are all in the view and at
        most ``rederive_tokens`` (set only for a summarizer that calls no model, whose
        cost is CPU), the records decide instead, as a one-shot summary would."""
        room = self.config.rederive_tokens - sum(g.tokens for g in covered)
        if job.parent is None or room <= 0:
            return None
        ids = job.covered_before
        history = await self.jobs.covered_records(job.req.session_id, ids, room)
        if history is None or len(history) != len(ids):  # another thread's, or withdrawn
            return None
        job.by_id.update((r.record_id, r) for r in history)
        groups = [*build_groups(history), *covered]
        return await self._merged(job, segment(groups, self.config.segment_tokens), None)

    async def _summarize_segments(
        self, job: JobState, segments: list[Segment], with_parent: bool = True
    ) -> tuple[list[SummaryDraft], list[SourceItem]]:
        """Each segment's draft, and every source item the summarizer was shown."""
        # the previous summary is context for the summarizer; it is bounded like every
        # summary (R11.2), and an old unbounded one is clipped, never sent whole.
        parent = job.parent if with_parent else None
        previous = parent.summary_text[: job.bound * CHARS_PER_TOKEN] if parent else None
        drafts: list[SummaryDraft] = []
        shown: list[SourceItem] = []
        total = sum(seg.tokens for seg in segments) or 1
        # the agent's own model continues its last request (issue 39 item 3).
        agent = await self.agents.request(job.req) if self.agents else None
        summarized = (job.req.parent_summary_id, job.covered_before)
        for i, seg in enumerate(segments):
            items = source_items(seg, job.by_id)
            shown.extend(items)
            job.calls += 1
            # R11.2: the segments share the bound by their size.
            share = max(MIN_BOUND, job.bound * seg.tokens // total)
            request = SummaryRequest(
                items,
                previous,
                min(job.output_tokens, share),
                f"{job.op_id}:{i}",
                plan=job.frontier.plan,
                constraints=job.frontier.declared,
                fork=agent.body if agent and agent.shows(items, *summarized) else None,
            )
            try:
                drafts.append(await self.summarizer.summarize(request, job.spent))
            except InvalidSummary as exc:
                raise invalid("validate", exc) from exc
            except (SummarizerFailed, TimeoutError) as exc:
                raise Stop("summarize", getattr(exc, "code", "summarizer_timeout")) from exc
        return drafts, shown

    async def _bounded(
        self, job: JobState, merged: SummaryDraft, covered: list[Group]
    ) -> tuple[SummaryDraft, dict[str, object] | None]:
        """The merged draft within the bound (R11.2, R11.8): summarized again from the
        records or rolled up by the summarizer if over it, patched by
        ``context.compact.after`` hooks, then fitted."""
        rollup: dict[str, object] | None = None
        over = self.counter.count(merged.text()) > job.bound
        calls = job.calls
        rederived = await self._rederived(job, covered) if over else None
        if rederived is not None:
            merged, over = rederived, False
            rollup = {
                "calls": job.calls - calls,
                "rederived": len(job.covered_before),  # the parent's records, read again
                "entries_in": len(job.covered_before) + sum(len(g.record_ids) for g in covered),
                "error": None,
            }
        if over:
            args = (job.bound, job.op_id, job.req.parent_summary_id, job.frontier.plan)
            merged, calls, rollup = await self.summarizer.roll_up(merged, *args, job.spent)
            job.calls += calls
        if any(b.point == AFTER for b in job.hooks):
            merged = await self._after_hooks(job, merged)
        # R11.4/R11.5: what the words of an entry say frames that entry, never fails the job.
        merged, job.text_rules = apply_text_rules(merged, job.frontier.plan, job.frontier.declared)
        # the bound holds whatever a model or a hook answered (R11.2).
        heading = summary_heading(job.frontier.plan)
        room = job.bound - (self.counter.count(f"{heading}\n") if heading else 0)
        merged, fitted = fit_draft(merged, room, self.counter.count)
        if fitted:
            rollup = {**(rollup or {}), "fitted_out": fitted}
        if rollup is not None:
            rollup["entries_out"] = len(merged.all_facts())
        return merged, rollup

    async def _after_hooks(self, job: JobState, merged: SummaryDraft) -> SummaryDraft:
        try:
            return await self.hooks.after(
                AfterCompact(job.req.session_id, job.req.run_id, merged), job.hooks
            )
        except HookFailed as exc:
            raise Stop("hooks", failure_reason(exc, "compact_after_failed")) from exc
        except InvalidSummary as exc:
            raise invalid("hooks", exc) from exc
        except Exception as exc:  # what a hook answered could not be used
            raise Stop("hooks", f"compact_after_failed:{type(exc).__name__}") from exc

    def _checked_ranges(
        self, job: JobState, merged: SummaryDraft, covered: list[Group]
    ) -> tuple[tuple[int, int], ...]:
        """R11.4: every covered record is cited or in a covered range; every citation is
        a record this summary covers (through its parents)."""
        ranges = merge_ranges(covered, job.parent.covered_ranges if job.parent else ())
        new = {i: job.by_id[i].session_sequence for g in covered for i in g.record_ids}
        try:
            check_coverage(merged, new, ranges, earlier=job.covered_before)
        except InvalidSummary as exc:
            raise invalid("validate", exc) from exc
        return ranges

    def _succeeded(
        self,
        job: JobState,
        merged: SummaryDraft,
        covered: list[Group],
        ranges: tuple[tuple[int, int], ...],
        rollup: dict[str, object] | None,
    ) -> CompactionOutcome:
        heading = summary_heading(job.frontier.plan)
        text = f"{heading}\n{merged.text()}" if heading else merged.text()
        new_ids = {i for g in covered for i in g.record_ids}
        parent_tokens = job.parent.summary_tokens if job.parent else 0
        body = {
            "draft": merged.to_dict(),
            "text": text,
            # R11.7: what the job kept verbatim on purpose (current task, recent groups,
            # pinned and unfinished groups) — referenced, not summarized.
            "retained_reference_ids": [
                r.record_id for r in job.records if r.record_id not in new_ids
            ],
            "bound_tokens": job.bound,
            "rollup": rollup,
            "text_rules": [d.to_dict() for d in job.text_rules],
        }
        return CompactionOutcome(
            job_id=job.req.job_id,
            status="succeeded",
            stage="save",
            summary_id=f"sum_{uuid.uuid4().hex[:16]}",
            parent_summary_id=job.req.parent_summary_id,
            summary_json=json.dumps(body),
            covered_ranges=ranges,
            covered_record_ids=tuple(sorted(job.covered_before | new_ids)),
            source_watermark=max(g.last_sequence for g in covered),
            summary_tokens=self.counter.count(text),
            covered_tokens=sum(g.tokens for g in covered) + parent_tokens,
            model_operation_id=job.op_id,
            model_calls=job.calls,
        )
