"""``user_turns`` (R7.2): user turns since the last committed summary reached
``compaction.user_turns``."""

from __future__ import annotations

from domain.compaction.trigger_kinds.kind import (
    Counters,
    Reading,
    TriggerInputs,
    TriggerKind,
    counted,
    period_passed,
)
from domain.policy.context_policy import CompactionPolicy

REASON = "user_turns"


def _check(i: TriggerInputs, fired: tuple[str, ...]) -> Reading | None:
    return counted(REASON, i.policy.user_turns, i.since.user_turns)


def _period(policy: CompactionPolicy, since: Counters, at_last: Counters) -> str | None:
    return period_passed(REASON, policy.user_turns, since.user_turns, at_last.user_turns)


KIND = TriggerKind(REASON, "user_turns", _check, period_passed=_period)
