"""The compaction service's job handler (R11, R15.3): load the job's inputs → plan it
(``domain.compaction.core``) → answer each step it waits on (the summarizer's calls, a
re-read of the records, the release's hooks) → its outcome → save the candidate →
publish it to the session's partition. Every decision is the core's; this is the I/O.

The session processor, not this service, commits the result (R11.6). The candidate is
saved in ``compaction_operations`` before anything is published, so a crash after the
model returned resumes from the saved candidate with no second model call.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
import uuid
from dataclasses import dataclass

from domain.compaction.core.finish import finish_job
from domain.compaction.core.job import JobInputs, JobLimits
from domain.compaction.core.plan import plan_job
from domain.compaction.core.steps import (
    Answer,
    AskAfter,
    AskBefore,
    Failure,
    Keep,
    Pending,
    ReadCovered,
    RollUp,
    Summarize,
)
from domain.compaction.drafts import SummaryDraft
from domain.compaction.errors import InvalidSummary
from domain.compaction.gateway import SummaryGateway
from domain.context.tokens import CachedCounter
from domain.policy.sections import HookBinding
from schemas.errors import HookFailed
from schemas.wire import CompactionOutcome, CompactionRequest
from services import metrics
from services.compaction.compact_hooks import (
    AfterCompact,
    BeforeCompact,
    HookChain,
    failure_reason,
)
from services.compaction.costs import CostNotes, Spent
from services.compaction.job_records import AgentRequests, JobRecords
from services.compaction.outcomes import outcome_event, outcome_of
from services.compaction.summarize import BoundedSummarizer
from storage.compaction.jobs import CompactionJobs, SavedOperation
from streams.kafka.publish import Publisher

log = logging.getLogger("agentloom.compaction")


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
    billed: bool = False  # a model summarizer: ``compaction.rollup`` auto fits, no call


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
        self.limits = JobLimits(
            config.segment_tokens, config.output_tokens, config.rederive_tokens, config.billed
        )

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
        """load → ``plan_job`` → the I/O each step waits on → ``finish_job`` → outcome."""
        step = plan_job(await self._load(req))
        while not isinstance(step, CompactionOutcome):
            step = finish_job(step, await self._answer(step, spent))
        return step

    async def _load(self, req: CompactionRequest) -> JobInputs:
        parent = await self.jobs.parent_summary(req.parent_summary_id)
        before = parent.covered_record_ids if parent else frozenset()
        return JobInputs(
            req,
            parent,
            await self.views.view(req, before),  # cached per thread between jobs
            await self.jobs.session_policy(req.session_id),
            await self.jobs.current_frontier(req.session_id, req.run_id, req.instance_id),
            self.limits,
            # a job counts its draft's text more than once (the bound, the fit, the
            # outcome), each a parent's lines with a few changed: each text is counted
            # once per job, each line once while the process keeps it
            functools.lru_cache(maxsize=16)(self.counter.count_lines),
            f"sum_{uuid.uuid4().hex[:16]}",
            # the agent's own model continues its last request (issue 39 item 3).
            await self.agents.request(req) if self.agents else None,
        )

    async def _answer(self, step: Pending, spent: Spent) -> Answer:
        """The I/O ``step`` waits on: the summarizer, the records, or the hooks."""
        if isinstance(step, Summarize | RollUp):
            return await self.summarizer.answer(step.requests, spent)
        if isinstance(step, ReadCovered):
            session_id = step.job.req.session_id
            return await self.views.covered(session_id, step.ids, step.max_tokens)
        req = step.job.req
        if isinstance(step, AskBefore):
            ctx = BeforeCompact(req.session_id, req.run_id, step.candidates, req.trigger_reasons)
            return await self._before_hooks(ctx, step.bindings)
        return await self._after_hooks(AfterCompact(req.session_id, req.run_id, step.merged), step)

    async def _before_hooks(
        self, ctx: BeforeCompact, bindings: tuple[HookBinding, ...]
    ) -> Keep | Failure:
        """``context.compact.before`` (R14): may keep more records verbatim and ask for a
        tighter summary. A hook's failure never changes the view."""
        try:
            before = await self.hooks.before(ctx, bindings)
        except HookFailed as exc:
            return Failure("hooks", failure_reason(exc, "compact_before_failed"))
        except Exception as exc:  # what a hook answered could not be used
            return Failure("hooks", f"compact_before_failed:{type(exc).__name__}")
        return Keep(before.keep_record_ids, before.max_output_tokens)

    async def _after_hooks(self, ctx: AfterCompact, step: AskAfter) -> SummaryDraft | Failure:
        """``context.compact.after`` (R14): may patch the summary's text only."""
        try:
            return await self.hooks.after(ctx, step.bindings)
        except HookFailed as exc:
            return Failure("hooks", failure_reason(exc, "compact_after_failed"))
        except InvalidSummary as exc:
            return Failure("hooks", exc.code, str(exc.details.get("reason")))
        except Exception as exc:  # what a hook answered could not be used
            return Failure("hooks", f"compact_after_failed:{type(exc).__name__}")
