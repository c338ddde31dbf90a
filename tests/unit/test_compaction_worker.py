"""The compaction worker's orchestration on fakes (no broker, no database), built through
the service's own composition root: the candidate is saved before it is published, a
saved outcome is republished with no model call, a concurrent delivery's candidate wins,
and every failure stage keeps the old view and is recorded (R11, R15.1, R15.3)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from domain.compaction.drafts import SummaryDraft
from domain.context.tokens import CachedCounter
from domain.policy.context_policy import ContextPolicy
from domain.policy.sections import HookBinding
from schemas.settings import Settings
from schemas.wire import CompactionOutcome, CompactionRequest
from services.compaction import bootstrap
from services.compaction.compact_hooks import (
    AFTER,
    BEFORE,
    AfterCompact,
    BeforeCompact,
    BeforeDecision,
    HookChain,
)
from services.compaction.outcomes import outcome_event, outcome_of
from services.compaction.scripted import ScriptedSummarizer
from services.compaction.worker import CompactionWorker
from storage.compaction.jobs import ParentSummary, SavedOperation
from storage.tokenizers import make_counter
from tests.unit.fakes.compaction import FakeCompactionJobs, history
from tests.unit.fakes.publisher import FakePublisher

SETTINGS = Settings(topic_records="records", topic_dead_letter="dead")
COUNTER = CachedCounter(make_counter("cl100k_base"))


def request(
    job_id: str = "cmp_1", run: int = 3, watermark: int = 12, **kw: object
) -> CompactionRequest:
    fields: dict[str, object] = {
        "job_id": job_id,
        "session_id": "ses_1",
        "run_id": f"run_{run}",
        "instance_id": f"ins_{run}",
        "view_watermark": watermark,
        "parent_summary_id": None,
        "policy_revision": "pol_1",
        "task_version": run,
        "trigger_reasons": ("user_turns",),
        "budget_before": 1000,
        "input_budget": 100_000,
        "target_tokens": 60_000,
        "max_calls": 4,
        "requested_at_ms": 0,
    }
    return CompactionRequest(**{**fields, **kw})  # type: ignore[arg-type]


def worker(
    jobs: FakeCompactionJobs,
    publisher: FakePublisher,
    script: list[str] | None = None,
    hooks: HookChain | None = None,
) -> tuple[CompactionWorker, ScriptedSummarizer]:
    gateway = ScriptedSummarizer(script or ["ok"])
    built = bootstrap.build_worker(SETTINGS, jobs, publisher, gateway, COUNTER, hooks)
    return built, gateway


def published(publisher: FakePublisher) -> list[CompactionOutcome]:
    return [outcome_of(m.value) for m in publisher.on("records")]


@pytest.mark.spec("R11.1", "R15.1")
async def test_the_old_prefix_is_summarized_saved_and_then_published() -> None:
    publisher = FakePublisher()
    jobs = FakeCompactionJobs(history(3), watch=publisher)
    w, gateway = worker(jobs, publisher)
    outcome = await w.handle(request())
    assert (outcome.status, outcome.stage, outcome.model_calls) == ("succeeded", "save", 1)
    # The two earlier runs are covered; the current question and the two most recent
    # complete interactions stay verbatim.
    assert outcome.covered_record_ids == tuple(sorted(f"rec_{i}" for i in range(1, 9)))
    assert outcome.covered_ranges == ((1, 8),) and outcome.source_watermark == 8
    body = json.loads(outcome.summary_json or "{}")
    assert body["retained_reference_ids"] == ["rec_9", "rec_10", "rec_11", "rec_12"]
    assert gateway.requests[0].model_operation_id == "cmp_1:model:0"
    saved = jobs.operations["cmp_1"]
    assert (saved.status, saved.model_calls, saved.model_operation_id) == (
        "candidate_saved",
        1,
        "cmp_1:model",
    )
    assert jobs.published_at_save == [0]  # saved while nothing was published yet
    (msg,) = publisher.on("records")
    assert msg.key == b"ses_1" and msg.how == "waited" and msg.value == saved.outcome


@pytest.mark.spec("R15.3")
async def test_a_saved_outcome_is_republished_without_a_model_call() -> None:
    publisher = FakePublisher()
    jobs = FakeCompactionJobs(history(3))
    first, _ = worker(jobs, FakePublisher())
    done = await first.handle(request())
    again, gateway = worker(jobs, publisher, ["fail"])  # a model call would fail the job
    outcome = await again.handle(request())
    assert gateway.calls == 0
    assert outcome == done
    assert [m.value for m in publisher.on("records")] == [jobs.operations["cmp_1"].outcome]


@pytest.mark.spec("R15.1", "R15.3")
async def test_a_concurrent_delivery_s_saved_candidate_is_the_one_published() -> None:
    earlier = CompactionOutcome("cmp_1", "succeeded", "save", summary_id="sum_earlier")
    data = outcome_event(request(), earlier)
    publisher = FakePublisher()
    jobs = FakeCompactionJobs(
        history(3),
        arrives_first=SavedOperation("cmp_1", "candidate_saved", "save", data, None, 1, None),
    )
    w, gateway = worker(jobs, publisher)
    outcome = await w.handle(request())
    assert gateway.calls == 1  # this delivery did the work, but lost the race to save
    assert outcome.summary_id == "sum_earlier"
    assert [m.value for m in publisher.on("records")] == [data]


@pytest.mark.spec("R11.4", "R15.3")
async def test_a_summary_citing_records_outside_its_segment_is_rejected() -> None:
    publisher = FakePublisher()
    jobs = FakeCompactionJobs(history(3))
    w, _ = worker(jobs, publisher, ["invalid"])
    outcome = await w.handle(request())
    assert (outcome.status, outcome.stage) == ("failed", "validate")
    assert outcome.reason is not None and outcome.reason.startswith("invalid_summary:")
    assert outcome.summary_id is None and outcome.model_calls == 1
    assert jobs.operations["cmp_1"].status == "failed"
    assert published(publisher) == [outcome]


@pytest.mark.spec("R15.3")
@pytest.mark.parametrize(
    ("step", "reason"), [("fail", "summarizer_failed"), ("timeout", "summarizer_timeout")]
)
async def test_a_summarizer_failure_is_recorded_with_its_stage(step: str, reason: str) -> None:
    publisher = FakePublisher()
    jobs = FakeCompactionJobs(history(3))
    w, _ = worker(jobs, publisher, [step])
    outcome = await w.handle(request())
    assert (outcome.status, outcome.stage, outcome.reason) == ("failed", "summarize", reason)
    saved = jobs.operations["cmp_1"]
    assert (saved.status, saved.stage, saved.error, saved.model_calls) == (
        "failed",
        "summarize",
        reason,
        1,
    )
    assert published(publisher) == [outcome]


@pytest.mark.spec("R9.4")
async def test_nothing_compressible_is_deferred_without_a_model_call() -> None:
    publisher = FakePublisher()
    jobs = FakeCompactionJobs(history(1))
    w, gateway = worker(jobs, publisher)
    outcome = await w.handle(request(run=1, watermark=4))
    assert (outcome.status, outcome.stage, outcome.reason) == (
        "deferred",
        "select",
        "nothing_compressible",
    )
    assert gateway.calls == 0 and jobs.operations["cmp_1"].status == "deferred"


@pytest.mark.spec("R11.3")
async def test_calls_are_bounded_and_the_rest_stays_verbatim_for_a_later_job() -> None:
    # 200 tokens a record, 500 a request: the question, then its tool group, then ...
    jobs = FakeCompactionJobs(history(6, tokens=200))
    gateway = ScriptedSummarizer(["ok"])
    settings = Settings(
        topic_records="records", compaction_segment_tokens=500, compaction_rederive_tokens=0
    )
    w = bootstrap.build_worker(settings, jobs, FakePublisher(), gateway, COUNTER)
    outcome = await w.handle(request(run=6, watermark=24, max_calls=2))
    assert outcome.status == "succeeded" and gateway.calls == outcome.model_calls == 2
    # ... so two calls cover the first question and its tool group only.
    assert outcome.covered_record_ids == ("rec_1", "rec_2", "rec_3")
    assert outcome.source_watermark == 3


class FailingAfter:
    name, version, timeout_s = "fails", "1", 5.0

    async def before(self, ctx: BeforeCompact) -> BeforeDecision:
        return BeforeDecision(keep_record_ids=frozenset({"rec_2", "rec_3"}))

    async def after(self, ctx: AfterCompact) -> SummaryDraft:
        raise RuntimeError("hook crashed")


@pytest.mark.spec("R14")
async def test_a_failing_after_hook_fails_the_job_at_stage_hooks() -> None:
    bound = tuple(HookBinding(point=p, hook="fails", version="1") for p in (BEFORE, AFTER))
    jobs = FakeCompactionJobs(history(3), policy=ContextPolicy(hook_bindings=bound))
    w, gateway = worker(jobs, FakePublisher(), hooks=HookChain((FailingAfter(),)))
    outcome = await w.handle(request())
    assert (outcome.status, outcome.stage) == ("failed", "hooks")
    assert outcome.reason == "compact_after_failed:RuntimeError"
    # The before hook kept the first tool group verbatim: the summarizer never saw it.
    seen = {i.record_id for r in gateway.requests for i in r.segment}
    assert seen and not seen & {"rec_2", "rec_3"}


@pytest.mark.spec("R14", "R17", "R1.4")
async def test_a_loaded_hook_the_release_does_not_bind_never_runs() -> None:
    jobs = FakeCompactionJobs(history(3))  # the release binds no hook
    w, _ = worker(jobs, FakePublisher(), hooks=HookChain((FailingAfter(),)))
    outcome = await w.handle(request())
    assert outcome.status == "succeeded", outcome


@pytest.mark.spec("R14", "R17")
async def test_a_bound_compaction_hook_that_is_not_loaded_fails_the_job_clearly() -> None:
    bound = (HookBinding(point=AFTER, hook="absent", version="2"),)
    jobs = FakeCompactionJobs(history(3), policy=ContextPolicy(hook_bindings=bound))
    w, _ = worker(jobs, FakePublisher(), hooks=HookChain((FailingAfter(),)))
    outcome = await w.handle(request())
    assert (outcome.status, outcome.stage) == ("failed", "hooks")
    assert outcome.reason == "hook_not_loaded:absent@2"


@pytest.mark.spec("R10.1", "R11.1", "R17")
@pytest.mark.parametrize(
    ("value", "status"),
    [("compressible", "succeeded"), ("active", "deferred"), ("required", "deferred")],
)
async def test_history_the_release_keeps_verbatim_is_never_summarized(
    value: str, status: str
) -> None:
    # Runs 1 and 2 are run 3's history: the only compressible content of this job.
    rules = dataclasses.replace(ContextPolicy().retention_rules, history=value)
    policy = dataclasses.replace(ContextPolicy(), retention_rules=rules)
    jobs = FakeCompactionJobs(history(3), policy=policy)
    w, gateway = worker(jobs, FakePublisher())
    outcome = await w.handle(request())
    assert outcome.status == status, outcome
    if status == "deferred":
        assert outcome.reason == "nothing_compressible" and gateway.calls == 0
    else:
        assert {"rec_1", "rec_2", "rec_3"} <= set(outcome.covered_record_ids)


@pytest.mark.spec("R11.8")
async def test_what_the_parent_covers_is_not_summarized_again() -> None:
    parent = ParentSummary(
        SummaryDraft((), (), (), (), (), ()).to_dict(),
        "",
        10,
        frozenset({"rec_1", "rec_2", "rec_3", "rec_4"}),
        ((1, 4),),
    )
    jobs = FakeCompactionJobs(history(4), parents={"sum_0": parent})
    w, gateway = worker(jobs, FakePublisher())
    outcome = await w.handle(request(run=4, watermark=16, parent_summary_id="sum_0"))
    assert outcome.status == "succeeded" and outcome.parent_summary_id == "sum_0"
    seen = {i.record_id for r in gateway.requests for i in r.segment}
    assert seen == {f"rec_{i}" for i in range(5, 13)}
    assert outcome.covered_ranges == ((1, 12),)
    assert outcome.covered_tokens == 10 + 8 * 20


@pytest.mark.spec("R15.3")
async def test_the_thread_view_is_extended_and_read_again_after_a_revocation() -> None:
    records = history(3)
    jobs = FakeCompactionJobs(records[:10])
    w, _ = worker(jobs, FakePublisher(), ["fail"])
    await w.handle(request("cmp_1", watermark=10))
    jobs.records = records
    await w.handle(request("cmp_2", watermark=12))
    assert jobs.reads == [("inherited", 0, 8), ("thread", 8, 10), ("thread", 10, 12)]
    jobs.epoch = "1:11"  # a resource was revoked: text read before may be withdrawn
    await w.handle(request("cmp_3", watermark=12))
    assert jobs.reads[3:] == [("inherited", 0, 8), ("thread", 8, 12)]


@pytest.mark.spec("R11.8")
async def test_a_cached_view_left_out_only_what_the_next_parent_still_covers() -> None:
    """Inherited records the parent covers are not read; a cached view that left some out
    serves the next job only if its parent covers them too (a successor covers a
    superset); another parent (a shorter lineage) reads the history again."""
    draft = SummaryDraft((), (), (), (), (), ()).to_dict()
    small = ParentSummary(draft, "", 10, frozenset({"rec_1", "rec_2"}), ((1, 2),))
    grown = ParentSummary(draft, "", 12, frozenset({"rec_1", "rec_2", "rec_3"}), ((1, 3),))
    other = ParentSummary(draft, "", 5, frozenset({"rec_1"}), ((1, 1),))
    jobs = FakeCompactionJobs(history(4), parents={"s1": small, "s2": grown, "s3": other})
    w, gateway = worker(jobs, FakePublisher())
    await w.handle(request("cmp_1", run=4, watermark=14, parent_summary_id="s1"))
    await w.handle(request("cmp_2", run=4, watermark=16, parent_summary_id="s2"))
    assert [r[0] for r in jobs.reads] == ["inherited", "thread", "thread"]  # cached
    await w.handle(request("cmp_3", run=4, watermark=16, parent_summary_id="s3"))
    assert [r[0] for r in jobs.reads][3:] == ["inherited", "thread"]  # read again
    # rec_2 and rec_3 were left out of the cached view, and s3 does not cover them:
    # only a fresh read shows them to the job.
    seen = {i.record_id for i in gateway.requests[-1].segment}
    assert {"rec_2", "rec_3"} <= seen


@pytest.mark.spec("R13.1")
async def test_a_child_thread_summarizes_its_own_records_only() -> None:
    jobs = FakeCompactionJobs(history(3))
    w, gateway = worker(jobs, FakePublisher())
    outcome = await w.handle(request(run=3, instance_id="ins_child"))
    assert (outcome.status, gateway.calls) == ("deferred", 0)  # the child has no records
