"""The built-in extractive summarizer as a ``SummaryGateway``: no model runs, the draft
is extracted from the segment (``domain.compaction.extractive``). The text rules run on
the job's merged draft in the worker, as for a model's draft."""

from __future__ import annotations

import time

from domain.compaction.drafts import SummaryRequest, SummaryResult
from domain.compaction.extractive import extract_draft


class ExtractiveSummarizer:
    """``SummaryGateway`` without a model: the embedded default and the test double."""

    name = "extractive"

    async def summarize(self, req: SummaryRequest) -> SummaryResult:
        started = time.perf_counter()
        draft = extract_draft(req)
        return SummaryResult(
            draft=draft,
            model_operation_id=req.model_operation_id,
            input_tokens=0,  # no model ran: the summary call costs nothing (R18)
            output_tokens=0,
            elapsed_ms=(time.perf_counter() - started) * 1000.0,
            adapter=self.name,
            model_call=False,
        )
