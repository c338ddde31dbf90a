"""What an observability event or a dead letter adds to the rollups — pure.

An event becomes a few ``Increment``s (metric, label, integer value); each lands in the
tumbling window (1 minute, 1 hour) of the event's own time, so a late event lands in its
window, never in the one being filled when it arrived. Dimensions (tenant space, agent,
release, model, purpose) come from the session, looked up by the caller: the events carry
ids and counts only. Values are integers (milliseconds, tokens, counts) so that sums are
exact and independent of the order the events are added in — which is what makes a replay
yield the same rollups. Distributions (estimated input tokens, by budget item) are kept
the same way, as counts per fixed log-scale bucket (``*_hist`` metrics), so percentiles
can be read back from any window's rows with a stated error bound (``REL_ERROR``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

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


def attributed(session: Dims, space_id: str | None, purpose: str = "") -> Dims:
    """The dimensions a fact counts under: its session's, unless the fact names the space
    of who wrote it (a dead letter's verified signer) and the session is not of that
    space — then that space alone. A refused event counts in its signer's space, never
    in the numbers of a session of another space it named."""
    if space_id is None or space_id == session.space_id:
        return replace(session, purpose=purpose)
    return Dims(space_id=space_id, purpose=purpose)


class Increment(NamedTuple):
    # A tuple, not a frozen dataclass: ~25 are built per prepare event, and the frozen
    # __init__ was an eighth of the analytics consumer's CPU (profiled).
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


# Percentiles from a mergeable histogram: fixed log-scale buckets (DDSketch's mapping,
# Masson et al. 2019) whose counts are plain integer increments, so they add up across
# batches, a replay and windows like every other rollup. Bucket i >= 1 holds the values in
# (GAMMA**(i-2), GAMMA**(i-1)]; bucket 0 holds 0. Reporting a bucket by
# 2 * GAMMA**(i-1) / (GAMMA + 1) is within REL_ERROR of every value in it, so a quantile
# read from the buckets is within REL_ERROR (relative) of the exact nearest-rank quantile,
# plus half a token from rounding to an integer.
REL_ERROR = 0.02
GAMMA = (1 + REL_ERROR) / (1 - REL_ERROR)
_LOG_GAMMA = math.log(GAMMA)
HIST_SUFFIX = "_hist"


def hist_index(value: int) -> int:
    """The histogram bucket of a non-negative integer (negative counts as 0)."""
    return 0 if value <= 0 else math.ceil(math.log(value) / _LOG_GAMMA) + 1


def hist_value(index: int) -> int:
    """The value reported for a bucket (within REL_ERROR of all it holds, then rounded)."""
    return 0 if index <= 0 else round(2 * GAMMA ** (index - 1) / (GAMMA + 1))


def _hist(metric: str, value: int | None, label: str = "") -> list[Increment]:
    """One count in ``metric``'s histogram; the label is ``<label>|<bucket>``."""
    if value is None:
        return []
    return [Increment(metric + HIST_SUFFIX, f"{label}|{hist_index(value)}", 1)]


def quantile(counts: Mapping[int, int], q: float) -> int | None:
    """Nearest-rank ``q`` quantile (0 < q <= 1) of a histogram {bucket: count}."""
    total = sum(counts.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for index in sorted(counts):
        seen += counts[index]
        if seen >= rank:
            return hist_value(index)
    raise AssertionError("unreachable: rank <= total")


# R9.5 / R9.4: the checks the anti-storm rules held back (no summarizer call).
STORM_REASONS = frozenset({"below_retry_growth_gate", "same_state_as_last_attempt"})


def _prepare(ev: ObservabilityEvent) -> list[Increment]:
    if ev.decision == "refused":
        return _inc("refusals", 1, ev.reason or "")
    out = _inc("prepares", 1)
    out += _inc("estimated_input_tokens", ev.estimated_input)
    out += _hist("estimated_input_tokens", ev.estimated_input)
    for item, tokens in sorted(ev.budget_items.items()):
        out += _inc("budget_item_tokens", tokens, item)
        out += _hist("budget_item_tokens", tokens, item)
    for decision, n in sorted(ev.counts.items()):
        out += _inc("prepare_decisions", n, decision)
    return out


def _compaction(ev: ObservabilityEvent) -> list[Increment]:
    outcome = ev.decision or ""
    out = _inc("compactions", 1, outcome)
    if ev.reason:
        out += _inc("compaction_reasons", 1, f"{outcome}:{ev.reason}"[:200])
    out += _inc("tokens_before", ev.budget_before)
    out += _inc("tokens_after", ev.budget_after)
    if ev.budget_before is not None and ev.budget_after is not None:
        out += _inc("tokens_saved", ev.budget_before - ev.budget_after)
    out += _inc("summarizer_calls", ev.model_calls)
    out += _inc("summarizer_input_tokens", ev.covered_tokens)
    out += _inc("summary_tokens", ev.summary_tokens)
    out += _inc("compaction_ms", ev.elapsed_ms)
    return out


def _trigger(ev: ObservabilityEvent) -> list[Increment]:
    out = _inc("trigger_checks", 1, ev.decision or "")
    if ev.reason in STORM_REASONS:
        out += _inc("storm_suppressions", 1, ev.reason or "")
    if ev.decision == "job_started":
        # each condition that fired for the job (R7.4: several may, one job)
        for condition in ev.fired:
            out += _inc("jobs_by_trigger", 1, condition)
    return out


# A model call's reported usage by kind (domain.pricing.Usage): the input kinds fresh,
# cached and cache write are disjoint and add up to input_tokens; output_tokens includes
# reasoning_tokens. Each is summed as usage_<kind>; a group's cache-hit share is
# usage_cached_input_tokens / usage_input_tokens of the same rows.
USAGE_KINDS = (
    "input_tokens",
    "fresh_input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
)
COST_METRIC = "cost_picos"  # label: the currency, so amounts of two currencies never add


def _model_call(ev: ObservabilityEvent) -> list[Increment]:
    # One event is one reported call, or a compaction job attempt's summarizer calls
    # (``model_calls`` of them, their usage summed).
    out = _inc("model_calls", 1 if ev.model_calls is None else ev.model_calls)
    out += _inc("estimated_input_tokens_called", ev.estimated_input)
    for item in USAGE_KINDS:
        out += _inc(f"usage_{item}", ev.budget_items.get(item))
    if ev.cost_picos is not None:
        out += _inc(COST_METRIC, ev.cost_picos, ev.currency or "")
    return out


def _processor(ev: ObservabilityEvent) -> list[Increment]:
    if ev.kind == "idempotent_hit":
        return _inc("idempotent_hits", ev.counts.get("hits", 1), ev.reason or "")
    return _inc("processor_dead_letters", 1, ev.reason or "")


def _readback(ev: ObservabilityEvent) -> list[Increment]:
    return _inc("readbacks", 1) + _inc("readback_chars", ev.read_size)


_BY_KIND: dict[str, Callable[[ObservabilityEvent], list[Increment]]] = {
    "prepare_budget": _prepare,
    "trigger_check": _trigger,
    "compaction_finished": _compaction,
    "model_call": _model_call,
    "revision_conflict": lambda ev: _inc("revision_conflicts", 1),
    "idempotent_hit": _processor,
    "dead_letter": _processor,
    "readback": _readback,
}


def observability_increments(ev: ObservabilityEvent) -> tuple[Increment, ...]:
    """R18: what one observability event counts, by kind (an unknown kind: nothing)."""
    by_kind = _BY_KIND.get(ev.kind)
    return () if by_kind is None else tuple(by_kind(ev))


def dead_letter_increments(dl: DeadLetter) -> tuple[Increment, ...]:
    return (Increment("dead_letters", dl.reason_code, 1),)


def rollup(
    facts: Iterable[Fact], windows: Iterable[str] = tuple(WINDOWS_MS)
) -> dict[RollupKey, int]:
    """Sum the facts' increments per window, bucket, dimensions, metric and label."""
    # Summed under flat tuples of strings and ints, whose hashes are cheap (strings cache
    # theirs); hashing a frozen dataclass per increment took half the consumer's time.
    sums: dict[tuple[str, int, int, str, str], int] = {}
    index: dict[Dims, int] = {}  # the dimensions hashed once per fact, not per increment
    wins = tuple(windows)
    for fact in facts:
        d = index.setdefault(fact.dims, len(index))
        for w in wins:
            start = bucket(fact.at_ms, w)
            for inc in fact.increments:
                key = (w, start, d, inc.metric, inc.label)
                sums[key] = sums.get(key, 0) + inc.value
    dims = list(index)
    return {RollupKey(w, b, dims[d], m, lab): v for (w, b, d, m, lab), v in sums.items()}


_ROW_DIMS = ("bucket_start", "space_id", "agent_id", "release_id", "model", "purpose")


def distributions(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Count, sum, p50 and p95 per window, dimensions, metric and label, from the API's
    rollup rows: the ``<metric>_hist`` rows give the percentiles (within REL_ERROR), the
    ``<metric>`` row with the same label the exact sum."""
    hists: dict[tuple[Any, ...], dict[int, int]] = {}
    sums: dict[tuple[Any, ...], int] = {}
    for r in rows:
        dims = tuple(r[d] for d in _ROW_DIMS)
        metric, label = str(r["metric"]), str(r["label"])
        if metric.endswith(HIST_SUFFIX):
            name, _, index = label.rpartition("|")
            key = (*dims, metric.removesuffix(HIST_SUFFIX), name)
            counts = hists.setdefault(key, {})
            counts[int(index)] = counts.get(int(index), 0) + int(r["value"])
        else:
            sums[(*dims, metric, label)] = sums.get((*dims, metric, label), 0) + int(r["value"])
    out: list[dict[str, Any]] = []
    for key, counts in hists.items():
        row = dict(zip((*_ROW_DIMS, "metric", "label"), key, strict=True))
        row.update(
            count=sum(counts.values()),
            sum=sums.get(key),
            p50=quantile(counts, 0.5),
            p95=quantile(counts, 0.95),
        )
        out.append(row)
    return out
