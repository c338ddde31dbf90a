"""The analytics summary that ends ``make demo`` (issue 12, R18): percentiles from the
stored histograms over the whole run, counters grouped, no raw histogram rows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from devstack.demo_analytics import summary
from domain.rollup import Dims, Fact, hist_index, hist_value, observability_increments, rollup
from schemas.wire import ObservabilityEvent

pytestmark = pytest.mark.spec("R18")

T0 = 1_700_000_000_000 - 1_700_000_000_000 % 60_000


def _rows(events: list[ObservabilityEvent]) -> list[dict[str, Any]]:
    """What the API answers for these events (1m window), as storage.analytics.query."""
    facts = [Fact(e.occurred_at_ms, Dims("sp", "ag", "rel", "m", e.purpose or ""),
                  observability_increments(e)) for e in events]  # fmt: skip
    return [
        {
            "bucket_start": datetime.fromtimestamp(k.bucket_ms / 1000, UTC).isoformat(),
            "space_id": k.dims.space_id,
            "agent_id": k.dims.agent_id,
            "release_id": k.dims.release_id,
            "model": k.dims.model,
            "purpose": k.dims.purpose,
            "metric": k.metric,
            "label": k.label,
            "value": v,
        }
        for k, v in rollup(facts, windows=("1m",)).items()
    ]


def _prepare(at: int, tokens: int, history: int) -> ObservabilityEvent:
    return ObservabilityEvent("prepare_budget", "s", "r", "i", at, "p", purpose="action",
                              estimated_input=tokens, budget_items={"history": history},
                              counts={"kept": 3, "summarized": 1})  # fmt: skip


def _events() -> list[ObservabilityEvent]:
    # Ten prepares over two 1m windows: the percentiles must span both.
    prepares = [_prepare(T0 + (i % 2) * 60_000, 1000 * (i + 1), 100 * (i + 1)) for i in range(10)]
    checks = [
        ObservabilityEvent("trigger_check", "s", "r", "i", T0, "p", decision=d)
        for d in ("none", "none", "job_started")
    ]
    dead = ObservabilityEvent("dead_letter", "s", "r", "i", T0, "p", reason="run_not_active")
    return [*prepares, *checks, dead]


def test_distributions_are_p50_and_p95_over_the_whole_run() -> None:
    lines = summary(_rows(_events()))
    est = next(x for x in lines if x.startswith("estimated_input_tokens:"))
    # Nearest rank over all ten values (1000..10000), read back from the buckets.
    p50, p95 = hist_value(hist_index(5000)), hist_value(hist_index(10000))
    assert est.split()[1:] == ["p50", f"{p50:,}", "·", "p95", f"{p95:,}", "(n=10)"]
    items = next(x for x in lines if x.startswith("budget_item_tokens p50/p95:"))
    assert items.split()[2:] == [
        "history",
        f"{hist_value(hist_index(500))}/{hist_value(hist_index(1000))}",
    ]
    assert not any("_hist" in x or "|" in x for x in lines)


def test_counters_are_grouped_one_line_per_group() -> None:
    lines = summary(_rows(_events()))
    prepares = next(x for x in lines if x.startswith("prepares:"))
    assert "prepares 10" in prepares
    assert "prepare_decisions: kept 30, summarized 10" in prepares
    triggers = next(x for x in lines if x.startswith("triggers:"))
    assert "trigger_checks: job_started 1, none 2" in triggers
    assert any(x.startswith("processor:") and "run_not_active 1" in x for x in lines)
    # Sums shown as distributions are not repeated as counters.
    assert not any(x.startswith("estimated_input_tokens") and "p50" not in x for x in lines)
    assert len(lines) == 5  # 2 distributions + prepares, triggers, processor


def test_no_rows_no_lines() -> None:
    assert summary([]) == []


def test_long_groups_wrap_under_their_first_part() -> None:
    rows = _rows([_prepare(T0, 10, 10)])
    rows += [dict(rows[0], metric="dead_letters", label=f"reason_{i}", value=1) for i in range(30)]
    dead = [x for x in summary(rows) if x.startswith("dead letters:") or x.startswith(" ")]
    assert len(dead) > 1
    assert all(len(x) <= 100 for x in dead)
    assert all(x.startswith(" " * 14) and x[14] != " " for x in dead[1:])
    # Pairs stay whole: a continuation line holds "reason_<i> 1" pairs, never a split one.
    pairs = [p.split() for x in dead[1:] for p in x.strip().rstrip(",").split(", ")]
    assert pairs
    assert all(name.startswith("reason_") and rest == ["1"] for name, *rest in pairs)
