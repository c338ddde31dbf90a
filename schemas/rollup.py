"""What an observability event or a dead letter adds to the rollups — pure.

An event becomes a few ``Increment``s (metric, label, integer value); each lands in the
tumbling window (1 minute, 1 hour) of the event's own time, so a late event lands in its
window, never in the one being filled when it arrived. Dimensions (tenant space, agent,
release, model, purpose) come from the session, looked up by the caller: the events carry
ids and counts only. Values are integers (milliseconds, tokens, counts) so that sums are
exact and independent of the order the events are added in — which is what makes a replay
yield the same rollups.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from schemas.wire import DeadLetter, ObservabilityEvent

WINDOWS_MS: dict[str, int] = {"1m": 60_000, "1h": 3_600_000}


@dataclass(frozen=True)
class Dims:
    """The rollup dimensions; ``""`` when unknown (a dead letter without a session)."""

    space_id: str = ""
    agent_id: str = ""
    release_id: str = ""
    model: str = ""
    purpose: str = ""


@dataclass(frozen=True)
class Increment:
    metric: str
    label: str
    value: int


@dataclass(frozen=True)
class RollupKey:
    window: str
    bucket_ms: int
    dims: Dims
    metric: str
    label: str


@dataclass(frozen=True)
class Fact:
    """One consumed event, ready to be rolled up: when, where, and what it adds."""

    at_ms: int
    dims: Dims
    increments: tuple[Increment, ...]


def bucket(at_ms: int, window: str) -> int:
    """Start (ms since the epoch) of the tumbling window holding ``at_ms``."""
    size = WINDOWS_MS[window]
    return at_ms - at_ms % size


def _inc(metric: str, value: int | float | None, label: str = "") -> list[Increment]:
    return [] if value is None else [Increment(metric, label, round(value))]


def observability_increments(ev: ObservabilityEvent) -> tuple[Increment, ...]:
    """R18: what one observability event counts, by kind."""
    out: list[Increment] = []
    if ev.kind == "prepare_budget":
        if ev.decision == "refused":
            out += _inc("refusals", 1, ev.reason or "")
        else:
            out += _inc("prepares", 1)
            out += _inc("estimated_input_tokens", ev.estimated_input)
            for item, tokens in sorted(ev.budget_items.items()):
                out += _inc("budget_item_tokens", tokens, item)
    elif ev.kind == "trigger_check":
        out += _inc("trigger_checks", 1, ev.decision or "")
    elif ev.kind == "compaction_finished":
        outcome = ev.decision or ""
        out += _inc("compactions", 1, outcome)
        if ev.reason:
            out += _inc("compaction_reasons", 1, f"{outcome}:{ev.reason}"[:200])
        out += _inc("tokens_before", ev.budget_before)
        out += _inc("tokens_after", ev.budget_after)
        if ev.budget_before is not None and ev.budget_after is not None:
            out += _inc("tokens_saved", ev.budget_before - ev.budget_after)
        out += _inc("summarizer_calls", ev.model_calls)
        out += _inc("summary_tokens", ev.summary_tokens)
        out += _inc("compaction_ms", ev.elapsed_ms)
    elif ev.kind == "model_call":
        out += _inc("model_calls", 1)
        out += _inc("estimated_input_tokens_called", ev.estimated_input)
        for item in ("input_tokens", "output_tokens"):
            out += _inc(f"usage_{item}", ev.budget_items.get(item))
    elif ev.kind == "revision_conflict":
        out += _inc("revision_conflicts", 1)
    return tuple(out)


def dead_letter_increments(dl: DeadLetter) -> tuple[Increment, ...]:
    return (Increment("dead_letters", dl.reason_code, 1),)


def rollup(
    facts: Iterable[Fact], windows: Iterable[str] = tuple(WINDOWS_MS)
) -> dict[RollupKey, int]:
    """Sum the facts' increments per window, bucket, dimensions, metric and label."""
    out: dict[RollupKey, int] = {}
    wins = tuple(windows)
    for fact in facts:
        for w in wins:
            start = bucket(fact.at_ms, w)
            for inc in fact.increments:
                key = RollupKey(w, start, fact.dims, inc.metric, inc.label)
                out[key] = out.get(key, 0) + inc.value
    return out
