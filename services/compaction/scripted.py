"""Scripted summarizer for tests: each call plays the next step of a script (R15.3).

Steps: ``ok`` (the extractive draft), ``fail`` (``SummarizerFailed``), ``timeout``
(``SummarizerTimeout``), ``empty`` (a draft with nothing in it) and ``invalid`` (a draft
citing a record outside the segment). The last two return normally: rejecting them is
the validator's job, which is what failure-matrix tests want to exercise. An exhausted
script repeats its last step, so "fail forever" is simply ``["fail"]``.
"""

from __future__ import annotations

from domain.compaction.drafts import Fact, SummaryDraft, SummaryRequest, SummaryResult
from domain.compaction.errors import SummarizerFailed, SummarizerTimeout
from services.compaction.extractive import ExtractiveSummarizer

STEPS = frozenset({"ok", "fail", "timeout", "empty", "invalid"})
FOREIGN_SOURCE_ID = "rec_not_in_segment"
EMPTY_DRAFT = SummaryDraft((), (), (), (), (), ())


class ScriptedSummarizer:
    name = "scripted"

    def __init__(self, script: list[str]) -> None:
        unknown = [step for step in script if step not in STEPS]
        if not script or unknown:
            raise ValueError(f"script needs steps from {sorted(STEPS)}, got {script!r}")
        self.script = list(script)
        self.calls = 0
        self.requests: list[SummaryRequest] = []
        self._extractive = ExtractiveSummarizer()

    async def summarize(self, req: SummaryRequest) -> SummaryResult:
        step = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        self.requests.append(req)
        details = {"step": step, "call": self.calls, "model_operation_id": req.model_operation_id}
        if step == "fail":
            raise SummarizerFailed("scripted failure", **details)
        if step == "timeout":
            raise SummarizerTimeout("scripted timeout", **details)
        result = await self._extractive.summarize(req)
        if step == "empty":
            draft = EMPTY_DRAFT
        elif step == "invalid":
            first = req.segment[0].record_id
            fact = Fact("cites a record outside the segment", (first, FOREIGN_SOURCE_ID))
            draft = SummaryDraft((fact,), (), (), (), (), ())
        else:
            draft = result.draft
        return SummaryResult(
            draft=draft,
            model_operation_id=req.model_operation_id,
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
            elapsed_ms=result.elapsed_ms,
            adapter=self.name,
            usage=result.usage,
            model_call=result.model_call,
        )
