"""A job over its bound with the built-in summarizer summarizes what it covers again from
the records (``CompactionWorker._rederived``) instead of rolling the parent summary's
entries up, while those records are at most ``compaction_rederive_tokens`` and all of
the main thread's; otherwise, and with a model summarizer, it rolls up (R11.8)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from domain.compaction.gateway import SummaryGateway
from domain.context.tokens import CachedCounter
from schemas.settings import Settings
from schemas.wire import CompactionOutcome, CompactionRequest
from services.compaction import bootstrap
from services.compaction.extractive import ExtractiveSummarizer
from storage.compaction.jobs import ParentSummary
from storage.tokenizers import make_counter
from tests.unit.fakes.compaction import FakeCompactionJobs, history
from tests.unit.fakes.publisher import FakePublisher

COUNTER = CachedCounter(make_counter("cl100k_base"))
RUNS = 30
# A budget whose 15% bound (the default ``summary_max_ratio``) the whole history outgrows.
BUDGET = 2_400


def _request(job: int, run: int, parent: str | None) -> CompactionRequest:
    return CompactionRequest(
        job_id=f"cmp_{job}",
        session_id="ses_1",
        run_id=f"run_{run}",
        instance_id=f"ins_{run}",
        view_watermark=4 * run,
        parent_summary_id=parent,
        policy_revision="pol_1",
        task_version=run,
        trigger_reasons=("user_turns",),
        budget_before=0,
        input_budget=BUDGET,
        target_tokens=BUDGET // 2,
        max_calls=4,
        requested_at_ms=0,
    )


async def _chain(
    settings: Settings, jobs: FakeCompactionJobs, summarizer: SummaryGateway | None = None
) -> list[CompactionOutcome]:
    """A job every third run, each extending the previous summary."""
    gateway = summarizer or ExtractiveSummarizer()
    worker = bootstrap.build_worker(settings, jobs, FakePublisher(), gateway, COUNTER)
    outcomes: list[CompactionOutcome] = []
    parent: str | None = None
    for k, run in enumerate(range(3, RUNS + 1, 3)):
        out = await worker.handle(_request(k, run, parent))
        assert out.status == "succeeded", (out.stage, out.reason)
        body = json.loads(out.summary_json or "{}")
        assert out.summary_id is not None
        jobs.parents[out.summary_id] = ParentSummary(
            body["draft"],
            body["text"],
            out.summary_tokens,
            frozenset(out.covered_record_ids),
            out.covered_ranges,
        )
        parent = out.summary_id
        outcomes.append(out)
    return outcomes


def _rollups(outcomes: list[CompactionOutcome]) -> list[dict[str, Any]]:
    return [json.loads(o.summary_json or "{}").get("rollup") or {} for o in outcomes]


def _settings(**kw: Any) -> Settings:
    return Settings(topic_records="records", topic_dead_letter="dead", **kw)


@pytest.mark.spec("R11.8", "R11.2")
async def test_over_its_bound_the_built_in_summarizer_summarizes_the_records_again() -> None:
    jobs = FakeCompactionJobs(history(RUNS, tokens=40))
    outcomes = await _chain(_settings(), jobs)
    rederived = [r for r in _rollups(outcomes) if "rederived" in r]
    assert rederived, "no job outgrew its bound"
    last = outcomes[-1]
    # every record the parent covered was read again; no roll-up note
    body = json.loads(last.summary_json or "{}")
    assert "rolled up summary" not in body["text"]
    parent = jobs.parents[str(last.parent_summary_id)]
    assert rederived[-1]["rederived"] == len(parent.covered_record_ids)
    assert last.summary_tokens <= body["bound_tokens"]


@pytest.mark.spec("R11.8")
async def test_past_its_token_limit_the_job_rolls_the_parent_up() -> None:
    jobs = FakeCompactionJobs(history(RUNS, tokens=40))
    outcomes = await _chain(_settings(compaction_rederive_tokens=300), jobs)
    rollups = [r for r in _rollups(outcomes) if r]
    assert rollups and all("calls" in r and "rederived" not in r for r in rollups)


@pytest.mark.spec("R11.8")
async def test_covered_records_the_view_cannot_read_again_mean_a_roll_up() -> None:
    jobs = FakeCompactionJobs(history(RUNS, tokens=40))

    async def missing_one(session_id: str, ids: frozenset[str], max_tokens: int) -> Any:
        found = [r for r in jobs.records if r.record_id in ids]
        return found[1:]  # one of them withdrawn or another thread's

    jobs.covered_records = missing_one  # type: ignore[method-assign]
    outcomes = await _chain(_settings(), jobs)
    rollups = [r for r in _rollups(outcomes) if r]
    assert rollups and not any("rederived" in r for r in rollups)


@pytest.mark.spec("R11.8")
def test_a_model_summarizer_never_rereads_and_keeps_its_segment_size() -> None:
    model = bootstrap.worker_config(
        _settings(summarizer="openai", summarizer_base_url="http://x", summarizer_model="m")
    )
    built_in = bootstrap.worker_config(_settings())
    assert (model.rederive_tokens, model.segment_tokens) == (0, 6000)
    assert built_in.rederive_tokens == built_in.segment_tokens == 65_536
