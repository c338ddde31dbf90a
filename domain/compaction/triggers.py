"""Proactive compaction triggers (R7, R8.4, R9): pure evaluation with anti-storm.

``evaluate_triggers(state, policy, observation)`` answers: does a compaction job start
now, which conditions fired (all reported, one job — R7.4), and if not, why (deferred or
suppressed, with a reason — R9.4). Thresholds are exact integers: ``context_ratio`` 0.80
of an InputBudget of 100,000 fires at 80,000 and not at 79,999 (R7.8). An estimate over
the hard budget always fires (``hard_budget``), whichever triggers are enabled (R9.7).
``job_expired`` decides when a job in flight is given up (R15.3).

With a ``GainCheck``, a job started by the ratio trigger alone that is not
forced by the hard budget must pay for itself (``domain.compaction.gain``): otherwise no
job, reason ``no_gain`` (a deferral). The turn triggers are a cadence the policy asks
for and run as configured; a job forced by the hard budget always runs.

The conditions are the trigger kinds of ``domain.compaction.trigger_kinds.table``
(one module each: ``context_ratio``, ``hard_budget``, ``cache_expired``, ``user_turns``,
``model_steps``), checked in the table's order; a kind that settles the decision when it
fired (``cache_expired``: no gain check, its own retry rules) does so before the gain
check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from domain.compaction.gain import NO_GAIN, GainInputs, estimate_gain
from domain.compaction.trigger_kinds.cache_expired import (
    CACHE_EXPIRED_AFTER_NO_GAIN,
    TOO_LITTLE,
)
from domain.compaction.trigger_kinds.cache_expired import REASON as CACHE_EXPIRED
from domain.compaction.trigger_kinds.context_ratio import REASON as CONTEXT_RATIO
from domain.compaction.trigger_kinds.kind import (
    DEFAULT_CACHE_TTL_MS,
    Counters,
    Observation,
    Reading,
    TriggerDecision,
    TriggerInputs,
    ratio_threshold,
)
from domain.compaction.trigger_kinds.table import TRIGGER_KINDS
from domain.policy.context_policy import CompactionPolicy
from domain.pricing import ModelPrices


@dataclass(frozen=True)
class LastAttempt:
    """What the previous (unsuccessful or deferred) attempt saw — the anti-storm memory."""

    fingerprint: str
    compressible_tokens: int
    counters: Counters
    input_budget: int
    required_tokens: int
    # After a job was refused for a version conflict: "due" — one job rebuilt
    # on a new state may start past the retry gate; "started" — this attempt is that job,
    # so a second conflict waits for a real change (R9.4, R9.5): never a loop.
    # "no_gain" — the check was deferred for no gain: no job ran.
    rebuild: str = ""


@dataclass(frozen=True)
class CompactionState:
    totals: Counters = field(default_factory=Counters)
    # R8.4: moves only with a committed summary
    baseline: Counters = field(default_factory=Counters)
    last_attempt: LastAttempt | None = None

    @property
    def since_success(self) -> Counters:
        return self.totals.minus(self.baseline)


@dataclass(frozen=True)
class GainCheck:
    """What the gain estimate needs beyond the observation: the view's fixed overhead
    (what precedes the summary, kept in the cache), the action model's prices (None:
    priced in tokens, ``domain.compaction.gain.TOKEN_RATES``), the summarizer's, and
    the largest step the view may grow by before the next call (a ``no_gain`` deferral
    must leave room for it under the hard budget)."""

    fixed_overhead: int
    prices: ModelPrices | None = None
    summarizer_overhead: int = 0  # tokens a job's summarizer reads besides the groups
    model_summarizer: bool = False  # the deployment's summarizer is a billed model
    # the compaction purpose's profile's prices, which a billed summarizer is charged at
    # (None: the action's)
    summarizer_prices: ModelPrices | None = None
    step_tokens: int = 0


REBUILD_DUE = "due"  # LastAttempt.rebuild: one rebuilt job may start
REBUILD_STARTED = "started"  # the attempt is the rebuilt job
REBUILD_NOTE = "rebuild_after_conflict"
# LastAttempt.rebuild of a check deferred for no gain (no job ran); a job it lets start
# past the retry gate when the hard budget forces one carries the note FORCED.
FORCED = "hard_budget_after_no_gain"


def job_expired(requested_at_ms: int, timeout_s: float, now_ms: int) -> bool:
    """R15.3: a job still in flight at ``requested_at_ms + timeout_s`` is expired — its
    request was lost, unreadable, or its worker died; the session must not wait forever."""
    return now_ms >= requested_at_ms + math.ceil(timeout_s * 1000)


def evaluate_triggers(
    state: CompactionState,
    policy: CompactionPolicy,
    obs: Observation,
    gain: GainCheck | None = None,
) -> TriggerDecision:
    inputs = TriggerInputs(policy, obs, state.since_success)
    decision = _evaluate(state, inputs)
    last = state.last_attempt
    after_no_gain = last is not None and last.rebuild == NO_GAIN
    for kind in TRIGGER_KINDS.values():
        if kind.settle is not None and kind.reason in decision.fired:
            return kind.settle(decision, inputs, after_no_gain)
    if gain is None or set(decision.fired) != {CONTEXT_RATIO}:
        return decision
    if not decision.start_job and not (
        after_no_gain and decision.reason == "below_retry_growth_gate"
    ):
        return decision
    since = state.since_success
    est = estimate_gain(
        policy,
        GainInputs(
            obs.estimated_input,
            obs.input_budget,
            gain.fixed_overhead,
            obs.compressible_tokens,
            since.model_steps,
            gain.step_tokens,
        ),
        gain.prices,
        gain.summarizer_overhead,
        gain.model_summarizer,
        gain.summarizer_prices,
    )
    # values >= thresholds reads as elsewhere: what it saves against what it costs.
    values = {**decision.values, "gain_saved": float(est.saved)}
    thresholds = {**decision.thresholds, "gain_saved": float(est.cost)}
    if not decision.start_job:
        # the last check deferred for no gain, so no job ran since: the retry gate (a
        # guard against repeating jobs) does not hold back one the hard budget forces.
        if est.forced:
            return TriggerDecision(True, decision.fired, values, thresholds, notes=(FORCED,))
        return TriggerDecision(False, decision.fired, values, thresholds, decision.reason)
    if est.pays:
        return TriggerDecision(True, decision.fired, values, thresholds, notes=decision.notes)
    return TriggerDecision(False, decision.fired, values, thresholds, NO_GAIN)


def _evaluate(state: CompactionState, inputs: TriggerInputs) -> TriggerDecision:
    policy, obs, since = inputs.policy, inputs.obs, inputs.since
    fired: list[str] = []
    values: dict[str, float] = {}
    thresholds: dict[str, float] = {}
    for kind in TRIGGER_KINDS.values():
        reading = kind.check(inputs, tuple(fired))
        if reading is not None:
            _record(reading, values, thresholds)
            if reading.fires:
                fired.append(kind.reason)

    def no(reason: str) -> TriggerDecision:
        return TriggerDecision(False, tuple(fired), values, thresholds, reason)

    if not fired:
        return no("below_thresholds")
    if obs.compressible_tokens <= 0:
        # R9.4: deferred, and no model call; named when a call in flight is the cause.
        return no(obs.held_by or "nothing_compressible")
    last = state.last_attempt
    if last is None:
        return TriggerDecision(True, tuple(fired), values, thresholds)
    if last.fingerprint == obs.fingerprint:
        return no("same_state_as_last_attempt")  # R9.4: never repeat on the same state
    if last.rebuild == REBUILD_DUE:
        # the view the refused job summarized changed under it: rebuild once on this one.
        return TriggerDecision(True, tuple(fired), values, thresholds, notes=(REBUILD_NOTE,))
    # R9.5: persistently over the soft threshold — retry only when something really
    # changed since the last attempt.
    growth = obs.compressible_tokens - last.compressible_tokens
    gate = ratio_threshold(policy.retry_growth_ratio, obs.input_budget)
    if growth >= gate:
        return TriggerDecision(True, tuple(fired), values, thresholds, notes=("growth",))
    grew = obs_turn_period_passed(policy, since, last.counters)
    if grew:
        return TriggerDecision(True, tuple(fired), values, thresholds, notes=(grew,))
    if obs.input_budget != last.input_budget or obs.required_tokens != last.required_tokens:
        return TriggerDecision(
            True, tuple(fired), values, thresholds, notes=("budget_or_required_changed",)
        )
    return no("below_retry_growth_gate")


def _record(reading: Reading, values: dict[str, float], thresholds: dict[str, float]) -> None:
    values.update(reading.values)
    thresholds.update(reading.thresholds)


def obs_turn_period_passed(
    policy: CompactionPolicy, since: Counters, at_last: Counters
) -> str | None:
    """An enabled counted kind grew another full period since the last attempt, or
    reached its threshold for the first time (R9.5: it may still fire once)."""
    for kind in TRIGGER_KINDS.values():
        if kind.period_passed is not None:
            passed = kind.period_passed(policy, since, at_last)
            if passed:
                return passed
    return None


__all__ = [
    "CACHE_EXPIRED",
    "CACHE_EXPIRED_AFTER_NO_GAIN",
    "DEFAULT_CACHE_TTL_MS",
    "FORCED",
    "REBUILD_DUE",
    "REBUILD_NOTE",
    "REBUILD_STARTED",
    "TOO_LITTLE",
    "CompactionState",
    "Counters",
    "GainCheck",
    "LastAttempt",
    "Observation",
    "TriggerDecision",
    "evaluate_triggers",
    "job_expired",
    "obs_turn_period_passed",
    "ratio_threshold",
]
