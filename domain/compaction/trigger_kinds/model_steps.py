"""``model_steps`` (R7.3): model steps since the last committed summary reached
``compaction.model_steps``."""

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

REASON = "model_steps"


def _check(i: TriggerInputs, fired: tuple[str, ...]) -> Reading | None:
    return counted(REASON, i.policy.model_steps, i.since.model_steps)


def _period(policy: CompactionPolicy, since: Counters, at_last: Counters) -> str | None:
    return period_passed(REASON, policy.model_steps, since.model_steps, at_last.model_steps)


KIND = TriggerKind(REASON, "model_steps", _check, period_passed=_period)
