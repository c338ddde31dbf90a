"""Bounded summarizer calls (R11.2, R11.3, R11.4): one segment per call under a timeout,
every draft validated against its own request, and the hierarchical roll-up that brings
a summary back within its bound (R11.8)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from domain.compaction.core.rollup import rolled_up, rollup_requests
from domain.compaction.core.steps import Drafts, Failure
from domain.compaction.drafts import SummaryDraft, SummaryRequest
from domain.compaction.errors import InvalidSummary, SummarizerFailed, SummarizerTimeout
from domain.compaction.gateway import SummaryGateway
from domain.compaction.validate import validate_draft
from domain.context.tokens import CachedCounter
from domain.frontier import Plan
from domain.usage import Usage
from schemas.summary_body import RollupNote
from services import metrics
from services.compaction.costs import AnsweredCall, Spent
from services.compaction.wording import render_segment

log = logging.getLogger("agentloom.compaction")
MAX_CHARS_PER_TOKEN = 6  # a draft far over its output cap is refused


def _call_outcome(exc: Exception) -> str:
    """The ``outcome`` label of a failed summarizer call."""
    if isinstance(exc, TimeoutError | SummarizerTimeout):
        return "timeout"
    return "invalid" if isinstance(exc, InvalidSummary) else "failed"


class BoundedSummarizer:
    def __init__(
        self,
        gateway: SummaryGateway,
        counter: CachedCounter,
        segment_tokens: int,
        call_timeout_s: float,
    ) -> None:
        self.gateway = gateway
        self.counter = counter
        self.segment_tokens = segment_tokens
        self.call_timeout_s = call_timeout_s

    async def summarize(self, req: SummaryRequest, spent: Spent | None = None) -> SummaryDraft:
        """One bounded summarizer call (R11.3), its draft validated against the request's
        own records (R11.4). Raises InvalidSummary, SummarizerFailed or TimeoutError.
        A model's answer goes to ``spent``, whether its draft is valid or not; a call that
        ran no model (the built-in extractive summarizer) bills nothing (R18)."""
        try:
            started = time.time_ns()
            result = await asyncio.wait_for(self.gateway.summarize(req), self.call_timeout_s)
            if spent is not None and result.model_call:
                call = AnsweredCall(
                    result.provider,
                    result.model,
                    req.model_operation_id,
                    result.usage,
                    started,
                    time.time_ns(),
                )
                spent.add(result.usage or self.counted(req, result.draft), result.elapsed_ms, call)
            validate_draft(
                result.draft, req.source_ids, req.max_output_tokens * MAX_CHARS_PER_TOKEN
            )
        except Exception as exc:
            metrics.SUMMARIZER_CALLS.labels(_call_outcome(exc)).inc()
            raise
        metrics.SUMMARIZER_CALLS.labels("ok").inc()
        metrics.SUMMARIZER_TOKENS.labels("input").inc(result.input_tokens)
        metrics.SUMMARIZER_TOKENS.labels("output").inc(result.output_tokens)
        return result.draft

    def counted(self, req: SummaryRequest, draft: SummaryDraft) -> Usage:
        """The usage of a model that reports none: the segment as it read it, and the draft
        it wrote, by our counter (an estimate of a call that did run)."""
        return Usage(
            fresh_input_tokens=self.counter.count(render_segment(req)),
            output_tokens=self.counter.count(draft.text()),
        )

    async def answer(
        self, requests: Sequence[SummaryRequest], spent: Spent | None = None
    ) -> Drafts:
        """The drafts of ``requests``, called one after another; the first call that
        fails ends the step (``Drafts.failure``), and no later request is sent."""
        drafts: list[SummaryDraft] = []
        for calls, req in enumerate(requests, start=1):
            try:
                drafts.append(await self.summarize(req, spent))
            except InvalidSummary as exc:
                failure = Failure("validate", exc.code, str(exc.details.get("reason")))
                return Drafts(tuple(drafts), calls, failure)
            except (SummarizerFailed, TimeoutError) as exc:
                code = getattr(exc, "code", "summarizer_timeout")
                return Drafts(tuple(drafts), calls, Failure("summarize", code))
        return Drafts(tuple(drafts), len(requests))

    async def roll_up(
        self,
        draft: SummaryDraft,
        bound: int,
        op_id: str,
        parent_id: str | None,
        plan: Plan | None = None,
        spent: Spent | None = None,
    ) -> tuple[SummaryDraft, int, RollupNote]:
        """``draft`` rolled up within ``bound`` on its own (R11.8), for the benchmarks:
        the job's roll-up is a step of ``domain.compaction.core``. Returns the draft, the
        calls made and what the roll-up did."""
        requests, entries = rollup_requests(
            draft, bound, op_id, plan or Plan(), self.segment_tokens, self.counter.count
        )
        answered = await self.answer(requests, spent)
        if answered.failure is not None:
            log.warning("roll-up failed (%s): fitting deterministically", answered.failure.code)
        note = RollupNote(
            calls=answered.calls,
            requests=len(requests),
            entries_in=entries,
            error=None if answered.failure is None else answered.failure.code,
        )
        rolled, note = rolled_up(draft, answered.drafts, note, bound, parent_id)
        return rolled, answered.calls, note
