"""The processor's and the compaction worker's paths for the policy-field effect table.

A trigger or job field goes the way a real check goes: the release is published into the
fake-backed Prepare, an action prepare sends its budget observation (R9.1), and the
processor's control handler (``streams.control.apply_controls``) decides it on the
session's release, read back from the published row (``ReleaseControlStore``). A
summarizing field goes through the compaction worker built by its own composition root,
with the job store reading the session's release (``ReleaseCompactionJobs``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from domain.compaction.control.effects import ControlEffects, JobRow, LockedState
from domain.compaction.triggers import Counters, LastAttempt
from domain.context.tokens import ByteEstimateCounter, CachedCounter
from schemas.settings import Settings
from schemas.wire import BudgetObservation, CompactionRequest, decode_control
from services.compaction import bootstrap
from services.compaction.scripted import ScriptedSummarizer
from services.prepare.bodies import PrepareIn
from streams.control import apply_controls
from tests.unit.fakes.compaction import history
from tests.unit.fakes.prepare import PrepareWorld
from tests.unit.fakes.publisher import FakePublisher
from tests.unit.fakes.release_backed import ReleaseCompactionJobs, ReleaseControlStore
from tests.unit.policy_effects.prepare_path import (
    MAIN,
    RUN,
    SID,
    Overrides,
    Probe,
    Scene,
    publish,
    world,
)

Locked = Callable[[BudgetObservation], LockedState]
NO_COUNTS = Counters()  # no turns or steps since the last summary


def groups(n: int, chars: int) -> Scene:
    """A question and ``n`` complete tool groups, each result ``chars`` characters."""

    def scene(w: PrepareWorld) -> PrepareIn:
        w.run(SID, RUN)
        w.say(SID, RUN, "user_input", "Map every module that imports the tokenizer.")
        for k in range(n):
            call = {"call_id": f"c{k}", "name": "grep", "arguments_json": f'{{"q": "m{k}"}}'}
            w.say(SID, RUN, "assistant_message", f"Step {k}.", tool_calls=[call])
            w.say(
                SID, RUN, "tool_outcome", f"{k}" * chars, call_id=f"c{k}", name="grep", status="ok"
            )
        return PrepareIn()

    return scene


def unlocked(obs: BudgetObservation) -> LockedState:
    return LockedState(None, None)


async def observed(
    overrides: Overrides,
    scene: Scene,
    counters: Counters = NO_COUNTS,
    locked: Locked = unlocked,
    active_job: JobRow | None = None,
) -> ControlEffects:
    """Publish, prepare (Prepare sends its observation), and let the processor decide it."""
    w = world()
    await publish(w, overrides)
    w.compaction.counters = counters
    await w.svc.preparer.prepare(SID, RUN, scene(w))
    events = [decode_control(m.value) for m in w.publisher.on("ctx.records")]
    (ev,) = [e for e in events if isinstance(e.body, BudgetObservation)]
    assert isinstance(ev.body, BudgetObservation)
    store = ReleaseControlStore(world=w, locked=locked(ev.body), active_job=active_job)
    result = await apply_controls(store, [ev])
    assert not result.failures, result.failures
    return store.data.applied[-1]


def decision_probe(
    scene: Scene, counters: Counters = NO_COUNTS, locked: Locked = unlocked
) -> Probe:
    """Which conditions fired, what was done (job started, deferred, ...) and why."""

    async def probe(overrides: Overrides) -> Any:
        fx = await observed(overrides, scene, counters, locked)
        assert fx.report is not None
        return fx.report.decision.fired, fx.report.kind, fx.report.reason

    return probe


def request_probe(scene: Scene) -> Probe:
    """The compaction request a started job is published with: its target and call cap."""

    async def probe(overrides: Overrides) -> Any:
        fx = await observed(overrides, scene)
        assert fx.request is not None
        return fx.request.target_tokens, fx.request.max_calls

    return probe


def retried_after(growth: int) -> Locked:
    """The previous attempt saw the same view but ``growth`` fewer compressible tokens."""

    def locked(obs: BudgetObservation) -> LockedState:
        last = LastAttempt(
            "earlier",
            obs.compressible_tokens - growth,
            Counters(),
            obs.input_budget,
            obs.required_tokens,
        )
        return LockedState(last, None)

    return locked


def job_in_flight_for(seconds: float) -> Probe:
    """A job requested ``seconds`` ago is in flight: what the check finishes of it."""

    async def probe(overrides: Overrides) -> Any:
        at = int(time.time() * 1000 - seconds * 1000)
        request = {"requested_at_ms": at, "policy_revision": "pol_old", "budget_before": 900}
        job = JobRow("cmp_old", "requested", "main", RUN, MAIN, request, Counters())
        fx = await observed(
            overrides, groups(1, 50), locked=lambda _: LockedState(None, "cmp_old"), active_job=job
        )
        return [(f.job_id, f.status) for f in fx.finished]

    return probe


# --- the compaction worker ---------------------------------------------------------------

SETTINGS = Settings(topic_records="records", topic_dead_letter="dead")
JOB_BUDGET = 10_000


def job_request() -> CompactionRequest:
    """A job on the third of three question runs of ``history`` (session SID)."""
    return CompactionRequest(
        job_id="cmp_1",
        session_id=SID,
        run_id="run_3",
        instance_id="ins_3",
        view_watermark=12,
        parent_summary_id=None,
        policy_revision="pol",
        task_version=3,
        trigger_reasons=("user_turns",),
        budget_before=1000,
        input_budget=JOB_BUDGET,
        target_tokens=6000,
        max_calls=4,
        requested_at_ms=0,
    )


async def compacted(overrides: Overrides) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """A job of the session run by the worker: the records it covered and the output
    bound of each summarizer call."""
    w = world()
    await publish(w, overrides)
    jobs = ReleaseCompactionJobs(history(3, SID), world=w)
    gateway = ScriptedSummarizer(["ok"])
    counter = CachedCounter(ByteEstimateCounter())
    worker = bootstrap.build_worker(SETTINGS, jobs, FakePublisher(), gateway, counter)
    outcome = await worker.handle(job_request())
    return outcome.covered_record_ids, tuple(r.max_output_tokens for r in gateway.requests)


async def rolled_up(overrides: Overrides) -> tuple[int, int | None]:
    """A job over its bound run by the worker (built-in summarizer): the roll-up calls
    it made and the calls its roll-up note reports (0: fitted without a call)."""
    w = world()
    await publish(w, overrides)
    jobs = ReleaseCompactionJobs(history(3, SID), world=w)
    gateway = ScriptedSummarizer(["ok"])
    counter = CachedCounter(ByteEstimateCounter())
    worker = bootstrap.build_worker(SETTINGS, jobs, FakePublisher(), gateway, counter)
    outcome = await worker.handle(job_request())
    note = json.loads(outcome.summary_json or "{}").get("rollup") or {}
    calls = sum(":rollup:" in r.model_operation_id for r in gateway.requests)
    return calls, note.get("calls")
