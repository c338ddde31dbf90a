"""Analytics distributions and the rollups added in issue 12 (SPEC R18), recounted from
the raw events by code written apart from domain.rollup's increments."""

from __future__ import annotations

import io
import math
from collections import Counter, defaultdict
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.rollup import (
    REL_ERROR,
    WINDOWS_MS,
    Dims,
    Fact,
    RollupKey,
    distributions,
    hist_index,
    hist_value,
    observability_increments,
    quantile,
    rollup,
)
from schemas import codec
from schemas.wire import ObservabilityEvent, decode_observability, encode_observability
from tests.unit.test_analytics_rollup import events

pytestmark = pytest.mark.spec("R18")


def _exact(values: list[int], q: float) -> int:
    """Nearest-rank quantile of the raw values."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def _close(estimate: int | None, exact: int) -> bool:
    # The bound the module states: REL_ERROR relative, plus half a token of rounding.
    return estimate is not None and abs(estimate - exact) <= REL_ERROR * exact + 0.5 + 1e-9


@given(st.integers(0, 10**9))
def test_every_value_is_reported_within_the_bound_by_its_bucket(value: int) -> None:
    assert _close(hist_value(hist_index(value)), value)


@given(st.integers(0, 10**9), st.integers(0, 10**9))
def test_buckets_keep_the_order_of_values(a: int, b: int) -> None:
    if a <= b:
        assert hist_index(a) <= hist_index(b)


@given(st.lists(st.integers(0, 2_000_000), min_size=1, max_size=300), st.floats(0.01, 1.0))
def test_quantiles_from_the_buckets_are_within_the_bound(values: list[int], q: float) -> None:
    counts = Counter(hist_index(v) for v in values)
    assert _close(quantile(counts, q), _exact(values, q))


def _rows(got: dict[RollupKey, int], window: str) -> list[dict[str, Any]]:
    """What storage.analytics.query hands the API (one space)."""
    return [
        {
            "bucket_start": k.bucket_ms,
            "space_id": k.dims.space_id,
            "agent_id": k.dims.agent_id,
            "release_id": k.dims.release_id,
            "model": k.dims.model,
            "purpose": k.dims.purpose,
            "metric": k.metric,
            "label": k.label,
            "value": v,
        }
        for k, v in got.items()
        if k.window == window
    ]


@settings(max_examples=150, deadline=None)
@given(st.lists(events, max_size=60))
def test_distributions_equal_a_recount_of_the_raw_values(evs: list[ObservabilityEvent]) -> None:
    facts = [Fact(e.occurred_at_ms, Dims(purpose=e.purpose or ""), observability_increments(e))
             for e in evs]  # fmt: skip
    got = rollup(facts)
    for window, size in WINDOWS_MS.items():
        raw: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        for e in evs:
            if e.kind != "prepare_budget" or e.decision == "refused":
                continue
            at = e.occurred_at_ms // size * size
            if e.estimated_input is not None:
                raw[(at, e.purpose or "", "estimated_input_tokens", "")].append(e.estimated_input)
            for item, tokens in e.budget_items.items():
                raw[(at, e.purpose or "", "budget_item_tokens", item)].append(tokens)
        dist = {
            (d["bucket_start"], d["purpose"], d["metric"], d["label"]): d
            for d in distributions(_rows(got, window))
        }
        assert set(dist) == set(raw)
        for key, values in raw.items():
            d = dist[key]
            assert (d["count"], d["sum"]) == (len(values), sum(values))
            assert _close(d["p50"], _exact(values, 0.5))
            assert _close(d["p95"], _exact(values, 0.95))


def _recount(evs: list[ObservabilityEvent]) -> Counter[tuple[str, str]]:
    """The issue-12 rollups, counted straight from the events (all in one window)."""
    out: Counter[tuple[str, str]] = Counter()
    for e in evs:
        if e.kind == "prepare_budget" and e.decision == "refused":
            out[("refusals", e.reason or "")] += 1
        elif e.kind == "prepare_budget":
            for decision, n in e.counts.items():
                out[("prepare_decisions", decision)] += n
        elif e.kind == "trigger_check":
            if e.reason in ("below_retry_growth_gate", "same_state_as_last_attempt"):
                out[("storm_suppressions", e.reason)] += 1
        elif e.kind == "compaction_finished":
            if e.budget_before is not None and e.budget_after is not None:
                out[("tokens_saved", "")] += e.budget_before - e.budget_after
            out[("summarizer_input_tokens", "")] += e.covered_tokens or 0
            out[("summary_tokens", "")] += e.summary_tokens or 0
        elif e.kind == "idempotent_hit":
            out[("idempotent_hits", e.reason or "")] += e.counts.get("hits", 1)
        elif e.kind == "dead_letter":
            out[("processor_dead_letters", e.reason or "")] += 1
        elif e.kind == "readback":
            out[("readbacks", "")] += 1
            out[("readback_chars", "")] += e.read_size or 0
    return out


NEW_METRICS = {
    "refusals", "prepare_decisions", "storm_suppressions", "tokens_saved",
    "summarizer_input_tokens", "summary_tokens", "idempotent_hits",
    "processor_dead_letters", "readbacks", "readback_chars",
}  # fmt: skip


def _nonzero(c: Counter[tuple[str, str]]) -> dict[tuple[str, str], int]:
    return {k: v for k, v in c.items() if v}


@settings(max_examples=150, deadline=None)
@given(st.lists(events, max_size=60))
def test_new_rollups_equal_a_recount(evs: list[ObservabilityEvent]) -> None:
    at_once = [ObservabilityEvent(**{**e.__dict__, "occurred_at_ms": 0}) for e in evs]
    got = rollup([Fact(0, Dims(), observability_increments(e)) for e in at_once], windows=("1h",))
    mine = Counter({(k.metric, k.label): v for k, v in got.items() if k.metric in NEW_METRICS})
    assert _nonzero(mine) == _nonzero(_recount(at_once))


def test_what_the_new_kinds_count() -> None:
    base = ("s", "r", "i", 0, "p")
    storm = ObservabilityEvent(
        "trigger_check", *base, decision="suppressed", reason="below_retry_growth_gate"
    )
    assert {(i.metric, i.label) for i in observability_increments(storm)} == {
        ("trigger_checks", "suppressed"),
        ("storm_suppressions", "below_retry_growth_gate"),
    }
    read = ObservabilityEvent("readback", *base, record_id="rec", read_offset=10, read_size=400)
    assert {(i.metric, i.value) for i in observability_increments(read)} == {
        ("readbacks", 1),
        ("readback_chars", 400),
    }
    prep = ObservabilityEvent(
        "prepare_budget", *base, estimated_input=1000, counts={"kept": 4, "dropped": 1}
    )
    incs = {(i.metric, i.label): i.value for i in observability_increments(prep)}
    assert incs[("prepare_decisions", "kept")] == 4
    assert incs[("estimated_input_tokens_hist", f"|{hist_index(1000)}")] == 1


def test_new_fields_round_trip_and_the_previous_writer_still_decodes() -> None:
    ev = ObservabilityEvent("readback", "s", "r", "i", 5, "p", record_id="x", read_size=3,
                            read_offset=0, counts={"hits": 2})  # fmt: skip
    assert decode_observability(encode_observability(ev)) == ev
    old = codec.schema("observability_event.v3.avsc")
    buf = io.BytesIO()
    buf.write(codec.MAGIC + old.fingerprint)
    rec = {**ObservabilityEvent("model_call", "s", "r", "i", 5, "p").__dict__, "fired": []}
    for gone in ("counts", "record_id", "read_offset", "read_size"):
        rec.pop(gone)
    fastavro.schemaless_writer(buf, old.parsed, rec)
    assert decode_observability(buf.getvalue()) == ObservabilityEvent(
        "model_call", "s", "r", "i", 5, "p"
    )
