"""The one table of trigger kinds (R7), in evaluation order: a condition reported in
``TriggerDecision.fired`` comes from exactly one entry. A new kind is one module with a
``TriggerKind`` and one line here (or ``register`` from its own module)."""

from __future__ import annotations

from domain.compaction.trigger_kinds import (
    cache_expired,
    context_ratio,
    hard_budget,
    model_steps,
    user_turns,
)
from domain.compaction.trigger_kinds.kind import TriggerKind

TRIGGER_KINDS: dict[str, TriggerKind] = {
    k.reason: k
    for k in (
        context_ratio.KIND,
        hard_budget.KIND,
        cache_expired.KIND,
        user_turns.KIND,
        model_steps.KIND,
    )
}


def register(kind: TriggerKind) -> None:
    """Add a kind after the built-in ones; its reason must be new."""
    if kind.reason in TRIGGER_KINDS:
        raise ValueError(f"trigger kind {kind.reason!r} is already registered")
    TRIGGER_KINDS[kind.reason] = kind


def unregister(reason: str) -> None:
    TRIGGER_KINDS.pop(reason, None)
