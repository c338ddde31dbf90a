"""The session processor's handling of control events: budget observations (trigger
checks, R9), compaction outcomes (commit by the owner, R8.4, R11.6) and pre-emptive
checks. Each one is read → decide → write: the facts are read through the
``ControlStore`` port, the decision is a pure function (``domain.compaction.control``,
``domain.compaction.outcome``, ``domain.compaction.preemption``) returning ``ControlEffects``, and
the store's one writer applies them.

Runs inside the batch transaction, after its own session's records that came before it
in the batch, so its counters and sequences are those the records just produced. The
compaction requests and observability events in the effects are published only once the
transaction has committed.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field

from domain.compaction.control.effects import ControlEffects, JobStart
from domain.compaction.control.observation import (
    judge_observation,
    observation_effects,
    redelivered,
)
from domain.compaction.outcome import decide_outcome
from domain.compaction.preemption import preemptive_event, probe_fires, reads_counters
from domain.compaction.triggers import Counters
from schemas.wire import (
    BudgetObservation,
    CompactionOutcome,
    CompactionRequest,
    ControlEvent,
    ObservabilityEvent,
)
from storage.compaction.state import Checked
from storage.processor_store import ControlStore
from streams.faults import describe_failure, is_transient

log = logging.getLogger("agentloom.processor")


@dataclass(frozen=True)
class ControlFailure:
    """A control event that could not be applied: dead-lettered with this reason."""

    event: ControlEvent
    code: str
    reason: str


@dataclass(frozen=True)
class ControlResult:
    requests: list[CompactionRequest]
    observability: list[ObservabilityEvent]
    reports: int
    commits: int
    refusals: int
    failures: list[ControlFailure] = field(default_factory=list)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _new_job_id() -> str:
    return f"cmp_{uuid.uuid4().hex[:16]}"


async def apply_controls(
    store: ControlStore, events: list[ControlEvent], *, isolate: bool = True
) -> ControlResult:
    """Apply ``events`` in order, each in a savepoint of the caller's transaction: one
    that raises (anything but a transient infrastructure error, which is re-raised so
    the batch is retried) is undone alone and returned in ``failures`` for the dead-letter
    topic — it never stops the partition (R15.3).

    ``isolate=False``: no savepoints (two round trips each), and whatever raises is
    raised — for a caller that then applies the whole batch again with ``isolate``
    (``streams.processor``: failures are rare, savepoints cost every event)."""
    requests: list[CompactionRequest] = []
    notes: list[ObservabilityEvent] = []
    failures: list[ControlFailure] = []
    reports = commits = refusals = 0
    for ev in events:
        try:
            async with store.transaction() if isolate else contextlib.nullcontext():
                if isinstance(ev.body, BudgetObservation):
                    effects = await observe(store, ev, ev.body)
                else:
                    effects = await settle(store, ev, ev.body)
        except Exception as exc:
            if not isolate:
                raise
            if is_transient(exc):
                raise
            # Nothing of it is published: its effects were undone with the savepoint.
            failures.append(ControlFailure(ev, *describe_failure(exc)))
            continue
        notes += effects.notes
        if effects.committed is None:
            reports += 1
            if effects.request is not None:
                requests.append(effects.request)
        else:
            commits += effects.committed
            refusals += not effects.committed
    return ControlResult(requests, notes, reports, commits, refusals, failures)


async def observe(store: ControlStore, ev: ControlEvent, obs: BudgetObservation) -> ControlEffects:
    """A budget observation: read → decide (R7, R9, R15.3) → write."""
    inputs = await store.observation_inputs(ev, obs)
    if isinstance(inputs, Checked):
        return redelivered(inputs.job_status, inputs.job_request)
    now = _now_ms()
    verdict = judge_observation(inputs, now)
    start = None
    if verdict.starts_job:
        version = await store.task_version(
            ev.session_id, inputs.lineage, ev.run_id, ev.instance_id, obs.view_watermark
        )
        plan, constraints = await store.frontier_versions(
            ev.session_id, inputs.lineage, ev.run_id, ev.instance_id
        )
        start = JobStart(_new_job_id(), version, plan, constraints)
    effects = observation_effects(inputs, verdict, start, now)
    await store.apply_control(effects)
    return effects


async def settle(store: ControlStore, ev: ControlEvent, out: CompactionOutcome) -> ControlEffects:
    """A compaction outcome: read → decide (R8.4, R11.6, R15.3) → write."""
    effects = decide_outcome(await store.outcome_inputs(ev, out), _now_ms())
    await store.apply_control(effects)
    return effects


async def waiting_again(store: ControlStore, session_ids: set[str]) -> list[CompactionRequest]:
    """R15.3: the requests of the jobs ``session_ids`` wait on, published again because
    their records came back as duplicates. A redelivery means the processor that wrote
    them may have died between its commit and its publish, and a job its pre-emptive
    check started then has no request on the bus and no observation on it to be
    redelivered (``redelivered`` covers those). The worker and the commit dedupe by job
    id, so a request that was published after all costs a saved-outcome lookup."""
    return await store.waiting_requests(sorted(session_ids)) if session_ids else []


async def after_batch(
    store: ControlStore, touched: list[str], redelivered: set[str], careful: bool
) -> tuple[list[CompactionRequest], list[ObservabilityEvent]]:
    """What a batch's records call for once written: the requests their redelivered
    sessions wait on, again (``waiting_again``), and the pre-emptive checks of the
    sessions they touched (``preempt``). Both repair or anticipate what later checks do
    too (Prepare's at the next action prepare, a job's expiry: R15.3), so one that fails
    is undone (``careful``: a savepoint) and skipped, never a reason to lose the batch's
    records; without ``careful``, what fails is raised (the batch is then applied again,
    carefully)."""
    if not (touched or redelivered):
        return [], []
    try:
        async with store.transaction() if careful else contextlib.nullcontext():
            requests = await waiting_again(store, redelivered)
            done = await preempt(store, touched) if touched else []
    except Exception as exc:
        if is_transient(exc) or not careful:
            raise
        log.exception("checks after a batch of %d sessions skipped", len(touched))
        return [], []
    requests += [e.request for e in done if e.request is not None]
    return requests, [note for e in done for note in e.notes]


async def preempt(store: ControlStore, session_ids: list[str]) -> list[ControlEffects]:
    """Pre-emptive checks of the sessions a batch touched
    (``domain.compaction.preemption``): a probe on the cached estimate, and where it
    fires an observation made on the runtime's behalf, checked like any other."""
    done: list[ControlEffects] = []
    for c in await store.preempt_candidates(session_ids):
        policy = c.policy.compaction
        # Without a counter trigger the probe reads no view state (2-3 round trips per
        # session a batch touched); the view is read once it fires.
        if not reads_counters(policy) and not probe_fires(c, policy, Counters(), Counters()):
            continue
        view = await store.main_view(c.session_id, c.run_id)
        if not probe_fires(c, policy, view.counters, view.baseline):
            continue
        main = await store.main_instance_id(c.session_id, c.run_id)
        if main is None:  # an active run always has its row; nothing to check without
            continue
        covered = frozenset(view.summary.covered_record_ids) if view.summary else frozenset()
        ev = preemptive_event(
            c,
            main,
            await store.view_records(
                c.session_id, c.run_id, main, view.through, covered, view.revocation_epoch
            ),
            covered,
            view.through,
            view.summary_id,
            c.policy.recent_complete_groups,
            _now_ms(),
        )
        assert isinstance(ev.body, BudgetObservation)
        done.append(await observe(store, ev, ev.body))
    return done
