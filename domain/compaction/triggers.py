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

``cache_expired``: a session that comes back after its model's prompt cache expired
(idle since its last model call at least the profile's ``cache_ttl``) pays its whole
prefix again on the next call, so compacting then destroys nothing cached. With the
ratio trigger on, a view at or above ``target_context_ratio`` — a compaction due soon —
is compacted at that point: the condition fires, no gain check applies (the cache a job
would destroy is gone), and it lets a job past the retry gate after a ``no_gain``
deferral (whose reason, the warm cache, is gone). A job it alone starts must remove at
least ``retry_growth_ratio`` of the budget (``too_little_compressible`` otherwise), so a
view that stays above the target after a commit is not compacted again at every return.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from domain.caching.rules import CACHE_TTLS, DEFAULT_TTL
from domain.compaction.gain import NO_GAIN, GainInputs, estimate_gain
from domain.policy.context_policy import CompactionPolicy
from domain.pricing import ModelPrices

CACHE_EXPIRED = "cache_expired"  # the trigger condition (a trigger reason)
# Why a job ``cache_expired`` alone would start does not: it would remove too little.
TOO_LITTLE = "too_little_compressible"
CACHE_EXPIRED_AFTER_NO_GAIN = "cache_expired_after_no_gain"  # the note of such a job
DEFAULT_CACHE_TTL_MS = CACHE_TTLS[DEFAULT_TTL] * 1000  # a profile without ``cache_ttl``


@dataclass(frozen=True)
class Counters:
    user_turns: int = 0
    model_steps: int = 0

    def minus(self, other: Counters) -> Counters:
        return Counters(self.user_turns - other.user_turns, self.model_steps - other.model_steps)

    def as_seen(self, later: Counters, baseline: Counters) -> Counters:
        """These totals without the ``later`` ones an observer did not see yet (its
        observation was overtaken by them), never below ``baseline``: a summary committed
        since, from a later check, counts from its own baseline (nothing since it, not a
        negative count). R8.4: a job started on them records the observed view's totals."""
        return Counters(
            max(self.user_turns - later.user_turns, baseline.user_turns),
            max(self.model_steps - later.model_steps, baseline.model_steps),
        )


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
    totals: Counters = Counters()
    baseline: Counters = Counters()  # R8.4: moves only with a committed summary
    last_attempt: LastAttempt | None = None

    @property
    def since_success(self) -> Counters:
        return self.totals.minus(self.baseline)


@dataclass(frozen=True)
class Observation:
    """One check, at an action prepare or pre-emptively in the processor (R9.1)."""

    estimated_input: int
    input_budget: int
    required_tokens: int
    compressible_tokens: int  # complete groups eligible for compaction (R11.1)
    fingerprint: str  # source + effective view + policy + dependency versions (R9.4)
    held_by: str | None = None  # open_call_in_flight:<call id> when that call holds it back
    # The prompt cache as the observer saw it: the time since the session's last model
    # call (None: none yet, or not measured) and how long the model's cache keeps an entry.
    idle_ms: int | None = None
    cache_ttl_ms: int = DEFAULT_CACHE_TTL_MS


@dataclass(frozen=True)
class TriggerDecision:
    start_job: bool
    fired: tuple[str, ...]  # conditions at or past their thresholds
    values: dict[str, float]
    thresholds: dict[str, float]
    reason: str | None = None  # why no job although something fired
    notes: tuple[str, ...] = field(default=())


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


def ratio_threshold(ratio: float, input_budget: int) -> int:
    """Smallest token count that reaches ``ratio`` of the budget, in exact arithmetic."""
    return math.ceil(Fraction(str(ratio)) * input_budget)


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
    decision = _evaluate(state, policy, obs)
    last = state.last_attempt
    after_no_gain = last is not None and last.rebuild == NO_GAIN
    if CACHE_EXPIRED in decision.fired:
        return _brought_forward(decision, policy, obs, after_no_gain)
    if gain is None or set(decision.fired) != {"context_ratio"}:
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


def _evaluate(
    state: CompactionState, policy: CompactionPolicy, obs: Observation
) -> TriggerDecision:
    since = state.since_success
    fired: list[str] = []
    values: dict[str, float] = {}
    thresholds: dict[str, float] = {}
    if policy.context_ratio is not None:
        t = ratio_threshold(policy.context_ratio, obs.input_budget)
        values["context_tokens"], thresholds["context_tokens"] = obs.estimated_input, t
        if obs.estimated_input >= t:
            fired.append("context_ratio")
    if "context_ratio" not in fired and obs.estimated_input > obs.input_budget:
        # R9.7: the hard budget implies compaction. Over it nothing is sent, so with the
        # ratio trigger off a session would stay stuck over budget, waiting for turn
        # triggers that cannot fire while no call goes out.
        values["hard_budget_tokens"] = obs.estimated_input
        thresholds["hard_budget_tokens"] = obs.input_budget + 1
        fired.append("hard_budget")
    if _cache_expired(policy, obs, values, thresholds):
        fired.append(CACHE_EXPIRED)
    if policy.user_turns is not None:
        values["user_turns"], thresholds["user_turns"] = since.user_turns, policy.user_turns
        if since.user_turns >= policy.user_turns:
            fired.append("user_turns")
    if policy.model_steps is not None:
        values["model_steps"], thresholds["model_steps"] = since.model_steps, policy.model_steps
        if since.model_steps >= policy.model_steps:
            fired.append("model_steps")

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


def _cache_expired(
    policy: CompactionPolicy,
    obs: Observation,
    values: dict[str, float],
    thresholds: dict[str, float],
) -> bool:
    """The cache expired while the session was idle and the view is at or above the
    target (with the ratio trigger on): reported beside the other conditions."""
    idle = obs.idle_ms
    if policy.context_ratio is None or idle is None or idle < obs.cache_ttl_ms:
        return False
    values["idle_ms"], thresholds["idle_ms"] = idle, obs.cache_ttl_ms
    target = ratio_threshold(policy.target_context_ratio, obs.input_budget)
    values["cache_expired_tokens"] = obs.estimated_input
    thresholds["cache_expired_tokens"] = target
    return obs.estimated_input >= target


def _brought_forward(
    decision: TriggerDecision, policy: CompactionPolicy, obs: Observation, after_no_gain: bool
) -> TriggerDecision:
    """A check at which the cache had expired: no gain check (nothing cached to destroy);
    after a ``no_gain`` deferral the retry gate does not hold the job back (no job ran
    since, and the deferral's reason is gone); a job this condition alone starts must
    remove at least the retry gate's tokens."""
    d = decision
    if not d.start_job:
        if after_no_gain and d.reason == "below_retry_growth_gate":
            notes = (CACHE_EXPIRED_AFTER_NO_GAIN,)
            return TriggerDecision(True, d.fired, d.values, d.thresholds, notes=notes)
        return d
    gate = ratio_threshold(policy.retry_growth_ratio, obs.input_budget)
    if d.fired == (CACHE_EXPIRED,) and obs.compressible_tokens < gate:
        return TriggerDecision(False, d.fired, d.values, d.thresholds, TOO_LITTLE)
    return d


def obs_turn_period_passed(
    policy: CompactionPolicy, since: Counters, at_last: Counters
) -> str | None:
    """An enabled turn counter grew another full period since the last attempt, or
    reached its threshold for the first time (R9.5: it may still fire once)."""
    if policy.user_turns is not None:
        if since.user_turns - at_last.user_turns >= policy.user_turns:
            return "user_turns_period"
        if at_last.user_turns < policy.user_turns <= since.user_turns:
            return "user_turns_first_reach"
    if policy.model_steps is not None:
        if since.model_steps - at_last.model_steps >= policy.model_steps:
            return "model_steps_period"
        if at_last.model_steps < policy.model_steps <= since.model_steps:
            return "model_steps_first_reach"
    return None
