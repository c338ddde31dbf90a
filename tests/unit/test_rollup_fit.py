"""``compaction.rollup`` through the compaction worker (R11.8, issue 39): with a billed
summarizer a job over its bound is fitted within half the bound with no roll-up call;
``summarizer`` asks for the roll-up; the built-in summarizer's ``auto`` is unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest

from domain.compaction.drafts import SummaryRequest, SummaryResult
from domain.policy.context_policy import ROLLUP_FIT_SHARE, effective_policy
from schemas.settings import Settings
from schemas.wire import CompactionOutcome
from services.compaction.extractive import ExtractiveSummarizer
from tests.unit.fakes.compaction import FakeCompactionJobs, history
from tests.unit.test_compaction_rederive import RUNS, _chain

MODEL = {"summarizer": "openai", "summarizer_base_url": "http://x", "summarizer_model": "m"}


class CountingSummarizer(ExtractiveSummarizer):
    """The extractive drafts, every request kept: which calls a job made."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[SummaryRequest] = []

    async def summarize(self, req: SummaryRequest) -> SummaryResult:
        self.requests.append(req)
        return await super().summarize(req)


async def chain(rollup: str, **settings: Any) -> tuple[list[CompactionOutcome], list[str]]:
    """The shared chain (a job every third run, each extending the previous summary) under
    ``rollup``; the outcomes and the summarizer's calls by op id."""
    jobs = FakeCompactionJobs(history(RUNS, tokens=40))
    jobs.policy = effective_policy({"compaction": {"rollup": rollup}})[0]
    summarizer = CountingSummarizer()
    s = Settings(topic_records="records", topic_dead_letter="dead", **settings)
    outcomes = await _chain(s, jobs, summarizer)
    return outcomes, [r.model_operation_id for r in summarizer.requests]


def rollups(outcomes: list[CompactionOutcome]) -> list[dict[str, Any]]:
    return [json.loads(o.summary_json or "{}").get("rollup") or {} for o in outcomes]


@pytest.mark.spec("R11.8", "R11.2")
async def test_a_billed_summarizers_job_over_its_bound_is_fitted_without_a_call() -> None:
    outcomes, calls = await chain("auto", **MODEL)
    fitted = [(o, r) for o, r in zip(outcomes, rollups(outcomes), strict=True) if r]
    assert fitted, "no job outgrew its bound"
    assert not any(":rollup:" in op for op in calls)  # no roll-up call, ever
    for out, note in fitted:
        assert note["calls"] == 0 and note["error"] is None
        assert note["fitted_out"] > 0 and note["entries_out"] < note["entries_in"]
        body = json.loads(out.summary_json or "{}")
        assert "fitted summary" in body["text"]
        # Within half the bound (its note on top): room for the next jobs' entries.
        assert out.summary_tokens <= body["bound_tokens"] * ROLLUP_FIT_SHARE + 60
    # Every job still covers its records: nothing goes uncovered by the fit.
    assert all(o.covered_record_ids for o in outcomes)


@pytest.mark.spec("R11.8")
async def test_rollup_summarizer_asks_the_billed_summarizer_to_condense() -> None:
    outcomes, calls = await chain("summarizer", **MODEL)
    assert any(":rollup:" in op for op in calls)
    assert any(r.get("requests") for r in rollups(outcomes))


@pytest.mark.spec("R11.8")
async def test_the_built_in_summarizer_keeps_rolling_up_by_itself_and_fit_is_its_choice() -> None:
    _, auto = await chain("auto", compaction_rederive_tokens=300)
    assert any(":rollup:" in op for op in auto)
    outcomes, fit = await chain("fit", compaction_rederive_tokens=300)
    assert not any(":rollup:" in op for op in fit)
    assert any(r.get("calls") == 0 for r in rollups(outcomes))
