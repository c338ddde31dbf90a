"""Analytics rollups (SPEC R18): the pure event → increments → window logic."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.rollup import (
    STORM_REASONS,
    WINDOWS_MS,
    Dims,
    Fact,
    bucket,
    dead_letter_increments,
    observability_increments,
    rollup,
)
from schemas.wire import DeadLetter, ObservabilityEvent

KINDS = [
    "trigger_check",
    "compaction_finished",
    "prepare_budget",
    "revision_conflict",
    "model_call",
    "idempotent_hit",
    "dead_letter",
    "readback",
]
REASONS = [None, "required_over_budget", "nothing_compressible", *sorted(STORM_REASONS)]
opt_int = st.none() | st.integers(0, 200_000)

events = st.builds(
    ObservabilityEvent,
    kind=st.sampled_from(KINDS),
    session_id=st.sampled_from(["s1", "s2", "s3"]),
    run_id=st.just("r"),
    instance_id=st.just("i"),
    occurred_at_ms=st.integers(0, 4 * 3_600_000),
    policy_revision=st.just("p"),
    purpose=st.sampled_from([None, "action", "compaction"]),
    decision=st.sampled_from([None, "refused", "committed", "deferred", "started"]),
    reason=st.sampled_from(REASONS),
    budget_items=st.dictionaries(
        st.sampled_from(["history", "input_tokens", "tools"]), st.integers(0, 50_000)
    ),
    counts=st.dictionaries(st.sampled_from(["kept", "summarized", "hits"]), st.integers(0, 9)),
    covered_tokens=opt_int,
    summary_tokens=opt_int,
    read_size=opt_int,
    estimated_input=opt_int,
    budget_before=opt_int,
    budget_after=opt_int,
    model_calls=st.none() | st.integers(0, 5),
    elapsed_ms=st.none() | st.floats(0, 1e6),
)
DIMS = {"s1": Dims("a", "agent", "rel", "m"), "s2": Dims("a", "agent2", "rel2", "m")}


def _fact(ev: ObservabilityEvent) -> Fact:
    base = DIMS.get(ev.session_id, Dims())
    dims = Dims(base.space_id, base.agent_id, base.release_id, base.model, ev.purpose or "")
    return Fact(ev.occurred_at_ms, dims, observability_increments(ev))


def _recount(evs: list[ObservabilityEvent], window: str) -> Counter[tuple[object, ...]]:
    """A naive recount straight from the raw events, written independently of rollup()."""
    out: Counter[tuple[object, ...]] = Counter()
    size = WINDOWS_MS[window]
    for ev in evs:
        f = _fact(ev)
        for inc in f.increments:
            out[(ev.occurred_at_ms // size * size, f.dims, inc.metric, inc.label)] += inc.value
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(events, max_size=40), st.randoms())
@pytest.mark.spec("R18")
def test_rollups_equal_a_recount_in_any_order(evs: list[ObservabilityEvent], rnd) -> None:  # type: ignore[no-untyped-def]
    shuffled = list(evs)
    rnd.shuffle(shuffled)
    got = rollup(_fact(e) for e in shuffled)
    assert got == rollup(_fact(e) for e in evs)  # order does not matter
    for window in WINDOWS_MS:
        mine = {
            (k.bucket_ms, k.dims, k.metric, k.label): v
            for k, v in got.items()
            if k.window == window
        }
        assert mine == {k: v for k, v in _recount(evs, window).items()}


@given(st.integers(0, 10**13), st.sampled_from(list(WINDOWS_MS)))
def test_bucket_is_the_window_holding_the_time(at: int, window: str) -> None:
    start = bucket(at, window)
    assert start <= at < start + WINDOWS_MS[window]
    assert start % WINDOWS_MS[window] == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(events, max_size=30), st.integers(0, 30))
def test_batches_add_up_to_the_whole(evs: list[ObservabilityEvent], cut: int) -> None:
    """What the consumer does: each batch is rolled up and added to the stored rows."""
    whole = rollup(_fact(e) for e in evs)
    halves = [rollup(_fact(e) for e in evs[:cut]), rollup(_fact(e) for e in evs[cut:])]
    merged: dict[object, int] = {}
    for h in halves:
        for k, v in h.items():
            merged[k] = merged.get(k, 0) + v
    assert merged == whole


def test_what_each_kind_counts() -> None:
    comp = ObservabilityEvent(
        "compaction_finished",
        "s1",
        "r",
        "i",
        0,
        "p",
        decision="committed",
        reason="target",
        budget_before=1000,
        budget_after=300,
        model_calls=2,
        elapsed_ms=12.6,
    )
    incs = {(i.metric, i.label): i.value for i in observability_increments(comp)}
    assert incs[("compactions", "committed")] == 1
    assert incs[("tokens_saved", "")] == 700
    assert incs[("summarizer_calls", "")] == 2
    assert incs[("compaction_ms", "")] == 13
    refused = ObservabilityEvent(
        "prepare_budget", "s1", "r", "i", 0, "p", decision="refused", reason="over"
    )
    assert [(i.metric, i.label) for i in observability_increments(refused)] == [
        ("refusals", "over")
    ]
    dl = DeadLetter("run_not_active", "x", "t", 0, 1, None, None, None, None, 5)
    assert [(i.metric, i.label, i.value) for i in dead_letter_increments(dl)] == [
        ("dead_letters", "run_not_active", 1)
    ]
