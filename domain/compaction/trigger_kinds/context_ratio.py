"""``context_ratio`` (R7.1, R7.8): the estimate reached ``compaction.context_ratio`` of the
InputBudget, in exact integers (0.80 of 100,000 fires at 80,000, not at 79,999)."""

from __future__ import annotations

from domain.compaction.trigger_kinds.kind import (
    Reading,
    TriggerInputs,
    TriggerKind,
    ratio_threshold,
)

REASON = "context_ratio"


def _check(i: TriggerInputs, fired: tuple[str, ...]) -> Reading | None:
    if i.policy.context_ratio is None:
        return None
    t = ratio_threshold(i.policy.context_ratio, i.obs.input_budget)
    est = i.obs.estimated_input
    return Reading({"context_tokens": est}, {"context_tokens": t}, est >= t)


KIND = TriggerKind(REASON, "context_ratio", _check)
