"""A job over its bound reads again the records its parent covers (R11.8); what an
earlier job of the session read is kept (``JobRecords.covered``), so each job reads only
the records no earlier one did — and the summaries are those of reading them all again.
A revocation (a new epoch) reads everything again (R15.3)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from domain.context.rendering import RecordView
from domain.context.tokens import CachedCounter
from schemas.settings import Settings
from schemas.wire import CompactionRequest
from services.compaction import bootstrap
from services.compaction.extractive import ExtractiveSummarizer
from services.compaction.job_records import JobRecords
from storage.compaction.jobs import ParentSummary
from storage.tokenizers import make_counter
from tests.unit.fakes.compaction import FakeCompactionJobs, history
from tests.unit.fakes.publisher import FakePublisher

COUNTER = CachedCounter(make_counter("cl100k_base"))
RUNS = 30
BUDGET = 2_400  # its 15% bound: the history outgrows it, and jobs re-derive


class CountingJobs(FakeCompactionJobs):
    """Records the ids of every ``covered_records`` read."""

    def __init__(self, records: list[RecordView]) -> None:
        super().__init__(records)
        self.covered_reads: list[frozenset[str]] = []
        self.revoked_after = 0  # the reads before the epoch changed

    async def covered_records(
        self, session_id: str, ids: frozenset[str], max_tokens: int
    ) -> list[RecordView] | None:
        self.covered_reads.append(ids)
        return await super().covered_records(session_id, ids, max_tokens)


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


async def _chain(jobs: CountingJobs, revoke_at: int = -1) -> list[dict[str, Any]]:
    """A job every third run, each extending the previous summary; the summaries'
    bodies without their (random) ids."""
    settings = Settings(topic_records="records", topic_dead_letter="dead")
    worker = bootstrap.build_worker(
        settings, jobs, FakePublisher(), ExtractiveSummarizer(), COUNTER
    )
    bodies: list[dict[str, Any]] = []
    parent: str | None = None
    for k, run in enumerate(range(3, RUNS + 1, 3)):
        if k == revoke_at:
            jobs.epoch = "1:0"
            jobs.revoked_after = len(jobs.covered_reads)
        out = await worker.handle(_request(k, run, parent))
        assert out.status == "succeeded", (out.stage, out.reason)
        assert out.summary_id is not None
        body = json.loads(out.summary_json or "{}")
        jobs.parents[out.summary_id] = ParentSummary(
            body["draft"],
            body["text"],
            out.summary_tokens,
            frozenset(out.covered_record_ids),
            out.covered_ranges,
        )
        parent = out.summary_id
        bodies.append(
            {"text": body["text"], "rollup": body.get("rollup"), "covered": out.covered_ranges}
        )
    return bodies


async def _read_all_again(
    self: JobRecords, session_id: str, ids: frozenset[str], max_tokens: int
) -> list[RecordView] | None:
    return await self.jobs.covered_records(session_id, ids, max_tokens)


@pytest.mark.spec("R11.8")
async def test_each_job_reads_only_the_covered_records_no_earlier_job_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kept = CountingJobs(history(RUNS, tokens=40))
    bodies = await _chain(kept)
    assert len(kept.covered_reads) >= 3, "the chain never re-derived"
    seen: set[str] = set()
    for ids in kept.covered_reads:
        assert not ids & seen, "a record read again"
        seen |= ids
    # the same summaries as reading every covered record again at every job
    monkeypatch.setattr(JobRecords, "covered", _read_all_again)
    again = CountingJobs(history(RUNS, tokens=40))
    assert await _chain(again) == bodies
    assert sum(map(len, again.covered_reads)) > sum(map(len, kept.covered_reads))


@pytest.mark.spec("R11.8", "R15.3")
async def test_after_a_revocation_the_covered_records_are_read_again() -> None:
    jobs = CountingJobs(history(RUNS, tokens=40))
    await _chain(jobs, revoke_at=7)
    reads, n = jobs.covered_reads, jobs.revoked_after
    assert 0 < n < len(reads)
    earlier = frozenset().union(*reads[:n])
    # the first read in the new epoch asks again for everything read before it
    assert earlier < reads[n]


async def _six_records() -> tuple[CountingJobs, JobRecords, frozenset[str]]:
    """A session's records, a job's view of them, and the ids of its first six (240 tokens)."""
    jobs = CountingJobs(history(4, tokens=40))
    views = JobRecords(jobs)
    await views.view(_request(0, 4, None), frozenset())
    return jobs, views, frozenset(r.record_id for r in jobs.records[:6])


@pytest.mark.spec("R11.8")
async def test_over_its_token_limit_the_kept_records_answer_none_without_a_read() -> None:
    jobs, views, ids = await _six_records()
    first = await views.covered("ses_1", ids, 10_000)
    assert first is not None and [r.record_id for r in first] == sorted(
        ids, key=lambda i: int(i.split("_")[1])
    )
    assert await views.covered("ses_1", ids, 100) is None  # 240 tokens kept: over 100
    assert len(jobs.covered_reads) == 1
    more = ids | {jobs.records[6].record_id}
    assert [r.record_id for r in await views.covered("ses_1", more, 10_000) or []] == [
        r.record_id for r in jobs.records[:7]
    ]
    assert jobs.covered_reads[-1] == {jobs.records[6].record_id}


@pytest.mark.spec("R11.8")
async def test_ids_found_over_the_limit_answer_their_supersets_without_a_read() -> None:
    jobs, views, ids = await _six_records()
    assert await views.covered("ses_1", ids, 100) is None  # 240 tokens: over 100
    assert len(jobs.covered_reads) == 1
    more = ids | {jobs.records[6].record_id}
    assert await views.covered("ses_1", more, 100) is None  # holds the 240: no read
    assert await views.covered("ses_1", more, 90) is None
    assert len(jobs.covered_reads) == 1
    # a larger limit, or a set that is no superset, is read
    assert await views.covered("ses_1", more, 10_000) is not None
    assert await views.covered("ses_1", frozenset(list(ids)[:2]), 100) is not None
    assert len(jobs.covered_reads) == 2


class WholeReads(CountingJobs):
    """Never continues a history: every job reads its inherited view whole."""

    async def inherited_after(
        self, session_id: str, run_id: str, instance_id: str, after: int, covered: frozenset[str]
    ) -> tuple[list[RecordView], int] | None:
        return None


def _whole_reads(jobs: CountingJobs) -> int:
    return sum(1 for what, after, _ in jobs.reads if what == "inherited" and after == 0)


@pytest.mark.spec("R2.2", "R11.8")
async def test_a_new_runs_job_goes_on_from_the_history_an_earlier_job_read() -> None:
    # every job of the chain is a new run's: its inherited view is the session's history
    kept = CountingJobs(history(RUNS, tokens=40))
    bodies = await _chain(kept)
    assert _whole_reads(kept) == 1  # the first job's; each later one read what came after it
    again = WholeReads(history(RUNS, tokens=40))
    assert await _chain(again) == bodies  # the same summaries as reading it whole each time
    assert _whole_reads(again) == len(bodies)
    # a revocation (a new epoch) reads the history whole again, once
    revoked = CountingJobs(history(RUNS, tokens=40))
    assert len(await _chain(revoked, revoke_at=7)) == len(bodies)
    assert _whole_reads(revoked) == 2


@pytest.mark.spec("R13.1")
async def test_a_child_threads_job_leaves_the_sessions_history_as_it_was() -> None:
    jobs = CountingJobs(history(RUNS, tokens=40))
    views = JobRecords(jobs)
    whole = WholeReads(history(RUNS, tokens=40))
    first = await views.view(_request(0, 6, None), frozenset())
    child = dataclasses.replace(_request(1, 9, None), instance_id="ins_child")
    assert await views.view(child, frozenset()) == []  # a child inherits nothing
    later = await views.view(_request(2, 12, None), frozenset())
    assert later == await JobRecords(whole).view(_request(2, 12, None), frozenset())
    assert first and len(later) > len(first)
    assert _whole_reads(jobs) == 2  # the first main view's, and the child's own
