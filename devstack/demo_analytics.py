"""The end of ``make demo``: what the analytics group rolled up from the demo's
own observability events, read back from the rollups through the API — counters grouped
by what they describe, distributions as p50 / p95 from the stored histograms (the same
``distributions`` the API answers with, over the whole run instead of per window)."""

from __future__ import annotations

import asyncio
import datetime as dt
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from storage.analytics import distributions

# One line per group, in this order; a metric in no group goes to "other".
GROUPS: dict[str, tuple[str, ...]] = {
    "prepares": ("prepares", "prepare_decisions", "refusals"),
    "triggers": ("trigger_checks", "storm_suppressions"),
    "compactions": (
        "compactions",
        "compaction_reasons",
        "tokens_before",
        "tokens_after",
        "tokens_saved",
        "summarizer_calls",
        "summary_tokens",
        "compaction_ms",
    ),
    "model calls": (
        "model_calls",
        "estimated_input_tokens_called",
        "usage_input_tokens",
        "usage_output_tokens",
    ),
    "read-backs": ("readbacks", "readback_chars"),
    "processor": ("idempotent_hits", "processor_dead_letters", "revision_conflicts"),
    "dead letters": ("dead_letters",),
}
NBSP = "\u00a0"
WIDTH, INDENT = 100, 14  # characters: the summary's width, and where a line's parts start
# Sums that say little once the distribution is shown (or that repeat another line).
HIDDEN = frozenset({"estimated_input_tokens", "budget_item_tokens", "summarizer_input_tokens"})


def _n(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def _whole_run(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows with their window and dimensions blanked: one demo-wide 'window'."""
    blank = dict.fromkeys(("bucket_start", "space_id", "agent_id", "release_id", "model"), "")
    return [{**r, **blank, "purpose": ""} for r in rows]


def _counters(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """metric -> label -> total, the histograms' bucket counts left out."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        if not r["metric"].endswith("_hist") and r["metric"] not in HIDDEN:
            out[r["metric"]][r["label"]] += int(r["value"])
    return out


def _pair(name: str, value: str) -> str:
    # textwrap breaks at ASCII whitespace only: a no-break space keeps a pair on one line.
    return f"{name}{NBSP}{value}"


def _part(metric: str, labels: Mapping[str, int]) -> str:
    if set(labels) == {""}:
        return _pair(metric, _n(labels[""]))
    inner = ", ".join(_pair(label or "-", _n(v)) for label, v in sorted(labels.items()))
    return f"{metric}: {inner}"


def _line(title: str, parts: list[str]) -> list[str]:
    """``title: part · part ...``, wrapped under the first part, never inside a pair."""
    text = f"{title + ':':<{INDENT - 1}} " + " · ".join(parts)
    wrapped = textwrap.wrap(text, WIDTH, subsequent_indent=" " * INDENT, break_on_hyphens=False)
    return [line.replace(NBSP, " ") for line in wrapped]


def _distribution_lines(merged: list[dict[str, Any]]) -> list[str]:
    by_metric: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in distributions(merged):
        by_metric[d["metric"]].append(d)
    lines = []
    for metric, ds in sorted(by_metric.items()):
        if [d["label"] for d in ds] == [""]:
            d = ds[0]
            parts = [_pair("p50", _n(d["p50"])), _pair("p95", _n(d["p95"])) + f" (n={d['count']})"]
        else:  # one line for all labels (budget items), p50/p95 each
            metric += " p50/p95"
            ds.sort(key=lambda d: d["label"])
            parts = [_pair(d["label"], f"{_n(d['p50'])}/{_n(d['p95'])}") for d in ds]
        lines += _line(metric, parts)
    return lines


def summary(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The summary's lines, from the API's rollup rows of the run (any windows)."""
    merged = _whole_run(rows)
    lines = _distribution_lines(merged)
    counters = _counters(merged)
    grouped = {m for ms in GROUPS.values() for m in ms}
    groups = {**GROUPS, "other": tuple(sorted(set(counters) - grouped))}
    for title, metrics in groups.items():
        parts = [_part(m, counters[m]) for m in metrics if m in counters]
        if parts:
            lines += _line(title, parts)
    return lines


async def print_summary(base: str, key: str, since: int, window: str = "1m") -> None:
    """Polls the rollups until two reads agree (the group has caught up), then prints."""
    params = {"window": window, "from": dt.datetime.fromtimestamp(since, dt.UTC).isoformat()}
    rows: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}) as c:
        for _ in range(30):
            await asyncio.sleep(1.0)
            now = (await c.get("/v1/analytics/rollups", params=params)).json().get("rows", [])
            if now and now == rows:
                break
            rows = now
    print("\n══ analytics of this run (rollups of ctx.observability, demo-space)")
    for line in summary(rows) or ["(no rollups yet)"]:
        print(f"   {line}")
