"""Bounded summarizer calls (R11.2, R11.3, R11.4): one segment per call under a timeout,
every draft validated against its own request, and the hierarchical roll-up that brings
a summary back within its bound (R11.8)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from domain.compaction.authored import keep_recorded
from domain.compaction.bound import ARTIFACTS_KEPT, MIN_BOUND, chunk, concat, rollup_items
from domain.compaction.drafts import SummaryDraft, SummaryRequest
from domain.compaction.errors import InvalidSummary, SummarizerFailed, SummarizerTimeout
from domain.compaction.gateway import SummaryGateway
from domain.compaction.validate import validate_draft
from domain.context.tokens import CachedCounter
from domain.frontier import Plan
from domain.usage import Usage
from services import metrics
from services.compaction.costs import AnsweredCall, Spent
from services.compaction.openai_compat import render_segment

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

    async def roll_up(
        self,
        draft: SummaryDraft,
        bound: int,
        op_id: str,
        parent_id: str | None,
        plan: Plan | None = None,
        spent: Spent | None = None,
    ) -> tuple[SummaryDraft, int, dict[str, object]]:
        """Hierarchical re-summarization (R11.8): the parent's entries and the new drafts
        become one summary within ``bound``. Each request holds at most one segment's
        worth of entries (R11.2). If the summarizer fails here, the deterministic fit
        still bounds the summary — a roll-up never leaves the session uncompactable.
        Returns the draft, the calls made and what the roll-up did (for the outcome)."""
        items = rollup_items(draft)
        chunks = chunk(items, self.segment_tokens, self.counter.count)
        per_chunk = max(MIN_BOUND, bound // max(1, len(chunks)))
        parts: list[SummaryDraft] = []
        calls = 0
        error = None
        for k, part in enumerate(chunks):
            calls += 1
            try:
                parts.append(
                    await self.summarize(
                        SummaryRequest(
                            part, None, per_chunk, f"{op_id}:rollup:{k}", plan=plan or Plan()
                        ),
                        spent,
                    )
                )
            except (InvalidSummary, SummarizerFailed, TimeoutError) as exc:
                error = getattr(exc, "code", "summarizer_timeout")
                log.warning("roll-up call %d failed (%s): fitting deterministically", k, error)
                break
        # A recorded decision or question is never reworded or lost by a roll-up.
        rolled = keep_recorded(draft, concat(parts)) if error is None else draft
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
