"""The facts a control decision is made on and the effects it yields (R7, R9, R15.3):
the locked ``compaction_state`` row, a job as requested, the inputs of one budget
observation, and the ``ControlEffects`` one writer applies in one transaction.
The decisions themselves are ``domain.compaction.control.observation`` and
``domain.compaction.outcome``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from domain.compaction.triggers import Counters, LastAttempt, TriggerDecision
from domain.policy.context_policy import CompactionPolicy
from domain.pricing import ModelPrices
from schemas.wire import BudgetObservation, CompactionRequest, ControlEvent, ObservabilityEvent


@dataclass(frozen=True)
class LockedState:
    """What the decisions need of a lineage's ``compaction_state`` row (locked)."""

    last_attempt: LastAttempt | None  # R9.4 anti-storm memory
    active_job_id: str | None  # R7.4 the job in flight
    attempts: int = 0


@dataclass(frozen=True)
class JobRow:
    """A compaction job as it was requested (``compaction_jobs``)."""

    job_id: str
    status: str  # requested | committed | rejected | failed | expired
    lineage: str
    run_id: str
    instance_id: str
    request: Mapping[str, Any]  # the CompactionRequest's fields
    observed: Counters  # the counters of the check that started it (R8.4)


@dataclass(frozen=True)
class ObservationInputs:
    """Everything one budget observation is decided on, read in one place."""

    event: ControlEvent
    observation: BudgetObservation
    lineage: str  # "main" or the child instance id (R13.1)
    policy: CompactionPolicy
    policy_revision: str  # the session's release now
    state: LockedState
    active_job: JobRow | None  # the row's job in flight, if it is known
    counters: Counters  # R2.6: counters of this run's view
    baseline: Counters  # R2.7: the baseline of the summary this view may reuse
    summary_id: str | None  # that summary
    # With the model profile's prices, a job the ratio trigger alone started
    # must pay for itself (``domain.compaction.gain``); without, the thresholds decide.
    prices: ModelPrices | None = None
    model_summarizer: bool = False  # the summarizer call is billed too (a model)
    # The prices of the profile the compaction purpose is budgeted on (None: as
    # ``prices``) and the tokens a billed summarizer reads per job besides the groups.
    summarizer_prices: ModelPrices | None = None
    summarizer_overhead: int = 0
    result_cap: int = 0  # the release's largest tool result (large_result_policy)


@dataclass(frozen=True)
class JobFinish:
    job_id: str
    status: str
    stage: str | None
    reason: str | None


@dataclass(frozen=True)
class TriggerReport:
    """A trigger check's report row (R9.2): what fired and what was done about it."""

    run_id: str
    event_key: str
    decision: TriggerDecision
    kind: str  # none | deferred | suppressed | job_started
    reason: str | None
    job_id: str | None
    policy_revision: str
    view_watermark: int
    totals: Counters
    baseline: Counters


@dataclass(frozen=True)
class NewJob:
    request: CompactionRequest
    observed: Counters


@dataclass(frozen=True)
class ControlEffects:
    """What one control event changes, written in one transaction by one writer, and
    what is published once it committed (``request``, ``notes``)."""

    session_id: str
    lineage: str
    state: Mapping[str, Any] = field(default_factory=dict)  # columns of the locked row
    finished: tuple[JobFinish, ...] = ()
    report: TriggerReport | None = None
    new_job: NewJob | None = None
    summary: Mapping[str, Any] | None = None  # a summary revision row (an outcome)
    view_tokens: tuple[int, int] | None = None  # (covered, summary) tokens replaced
    notes: tuple[ObservabilityEvent, ...] = ()
    request: CompactionRequest | None = None
    committed: bool | None = None  # for an outcome: whether its summary committed


@dataclass(frozen=True)
class ObservationVerdict:
    decision: TriggerDecision
    active_job_id: str | None  # after expiry
    expiry: ControlEffects  # the expiry's own effects (empty when nothing expired)

    @property
    def starts_job(self) -> bool:
        return self.decision.start_job and self.active_job_id is None


@dataclass(frozen=True)
class JobStart:
    """What starting a job needs beyond the inputs: a fresh id and the task version the
    job depends on (R11.6), read only when a job starts."""

    job_id: str
    task_version: int
    plan_version: int = 0  # the thread's plan and constraint versions (R11.6)
    constraints_version: int = 0
