"""``hard_budget`` (R9.7): an estimate over the hard budget always fires, whichever
triggers are enabled. Over it nothing is sent, so with the ratio trigger off a session
would stay stuck over budget, waiting for turn triggers that cannot fire while no call
goes out. Reported only when the ratio trigger did not fire already."""

from __future__ import annotations

from domain.compaction.trigger_kinds import context_ratio
from domain.compaction.trigger_kinds.kind import Reading, TriggerInputs, TriggerKind

REASON = "hard_budget"


def _check(i: TriggerInputs, fired: tuple[str, ...]) -> Reading | None:
    if context_ratio.REASON in fired or i.obs.estimated_input <= i.obs.input_budget:
        return None
    key = "hard_budget_tokens"
    return Reading({key: i.obs.estimated_input}, {key: i.obs.input_budget + 1}, True)


KIND = TriggerKind(REASON, None, _check)
