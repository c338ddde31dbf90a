"""What a trigger kind is and what it reads (R7, R9).

A ``TriggerKind`` names its condition (the reason reported in ``fired`` when it fires),
the policy field that enables it and sets its threshold, and its check: given one
check's inputs and the conditions fired before it, a ``Reading`` (the values and
thresholds it reports, and whether it fired) or None when it does not apply. A counted
kind also says when its counter grew another period since the last attempt (R9.5), and
a kind may settle the decision when it fired (``cache_expired`` does).

The observation and counters every kind reads live here too, so a kind's module needs
nothing from ``domain.compaction.triggers`` (which evaluates the kinds).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from domain.caching.rules import CACHE_TTLS, DEFAULT_TTL
from domain.policy.context_policy import CompactionPolicy

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
class TriggerInputs:
    """What every kind's check reads: the policy, the observation, and the counters since
    the last committed summary (R8.4)."""

    policy: CompactionPolicy
    obs: Observation
    since: Counters


@dataclass(frozen=True)
class Reading:
    """One kind's part of a check: the values and thresholds it reports (in this order),
    and whether its condition fired."""

    values: Mapping[str, float]
    thresholds: Mapping[str, float]
    fires: bool


Check = Callable[[TriggerInputs, tuple[str, ...]], Reading | None]
PeriodPassed = Callable[[CompactionPolicy, Counters, Counters], str | None]
# (the decision, the inputs, whether the last check was deferred for no gain)
Settle = Callable[[TriggerDecision, TriggerInputs, bool], TriggerDecision]


@dataclass(frozen=True)
class TriggerKind:
    reason: str  # the condition reported in ``TriggerDecision.fired``
    policy_field: str | None  # the field that enables it (None: always on)
    check: Check
    period_passed: PeriodPassed | None = None
    settle: Settle | None = None
    reads_counters: bool = False  # its check reads ``TriggerInputs.since``

    def enabled(self, policy: CompactionPolicy) -> bool:
        """The policy turns it on (a kind without a policy field always is)."""
        return self.policy_field is None or getattr(policy, self.policy_field) is not None


def ratio_threshold(ratio: float, input_budget: int) -> int:
    """Smallest token count that reaches ``ratio`` of the budget, in exact arithmetic."""
    return math.ceil(Fraction(str(ratio)) * input_budget)


def counted(reason: str, threshold: int | None, count: int) -> Reading | None:
    """A counter kind's reading: off without a threshold, fires at it (R7.2, R7.3)."""
    if threshold is None:
        return None
    return Reading({reason: count}, {reason: threshold}, count >= threshold)


def period_passed(reason: str, threshold: int | None, since: int, at_last: int) -> str | None:
    """A counter grew another full period since the last attempt, or reached its
    threshold for the first time (R9.5: it may still fire once)."""
    if threshold is None:
        return None
    if since - at_last >= threshold:
        return f"{reason}_period"
    if at_last < threshold <= since:
        return f"{reason}_first_reach"
    return None


def counter_kind(name: str) -> TriggerKind:
    """A counter kind: the counter ``name`` of ``Counters`` since the last committed
    summary reached the policy's ``compaction.<name>`` (``counted``, ``period_passed``)."""

    def check(i: TriggerInputs, fired: tuple[str, ...]) -> Reading | None:
        return counted(name, getattr(i.policy, name), getattr(i.since, name))

    def period(policy: CompactionPolicy, since: Counters, at_last: Counters) -> str | None:
        threshold = getattr(policy, name)
        return period_passed(name, threshold, getattr(since, name), getattr(at_last, name))

    return TriggerKind(name, name, check, period_passed=period, reads_counters=True)
