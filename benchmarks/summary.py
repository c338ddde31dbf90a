"""``python -m benchmarks.summary`` (last step of ``make bench``): one table of the
headline numbers the benchmarks wrote to ``build/bench/*.json``, each beside its ceiling
or target with the ratio, and ``build/bench/summary.json``.

The reader is tolerant on purpose: a benchmark that did not run, or an older one that
does not write a key yet, gives "n/a" in its row, never a crash, so the table still shows
everything that was measured. Where a key's name is not settled (the no-op faust rate,
the analytics p99s) the value is found by the words its path contains.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "build" / "bench"
SOURCES = {
    "run": "results.json",
    "prepare_cold": "prepare_cold.json",
    "prepare_scale": "prepare_scale.json",
    "compaction": "compaction.json",
    "throughput": "compaction_throughput.json",
    "analytics": "analytics.json",
    "long_session": "long_session.json",
    "fidelity": "summary_fidelity.json",
    "floor": "ingest_floor.json",
    "cost": "cost.json",
    "real_transcripts": "real_transcripts.json",
    "frontier": "frontier.json",
    "frontier_blind": "frontier_blind.json",
    "agents": "agents.json",
}
# Issue 13's targets for a cold prepare's p99 (as in benchmarks.prepare_cold.TARGET_MS;
# repeated so that this reader does not depend on that module importing cleanly).
COLD_TARGET_MS = {10_000: 100.0, 100_000: 1000.0}
# The envelope's sign and check per message when a runtime signed with its key's sha256
# (docs/design-notes.md), the reference for issue 38's per-runtime secret.
ENVELOPE_BEFORE_US = (2.2, 3.4)
INGEST_TARGET_RATIO = 0.5  # end to end vs the producer ceiling (docs/scaling.md)
# Issue 37's targets for benchmarks.agents: steps/s at 48 agents, prepare p99 by agents,
# CPU per agent step.
AGENTS_STEPS_TARGET = 180.0
AGENTS_P99_TARGET_MS = {4: 30.0, 48: 100.0}
AGENTS_CPU_TARGET_MS = 10.0


@dataclass(frozen=True)
class Row:
    """One line of the table. ``ceiling`` is empty when nothing applies; ``ratio`` is
    value / ceiling (or the stated comparison), None when not measured."""

    measure: str
    value: float | None
    unit: str = ""
    ceiling: str = ""
    ratio: float | None = None


# ── tolerant reading ──────────────────────────────────────────────────────────────────


def load(directory: Path) -> dict[str, Any]:
    """Each source's JSON, or {} when it is missing or unreadable."""
    data: dict[str, Any] = {}
    for name, file in SOURCES.items():
        try:
            loaded = json.loads((directory / file).read_text())
        except (OSError, ValueError):
            loaded = {}
        data[name] = loaded if isinstance(loaded, dict) else {}
    return data


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def dig(d: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def num(d: Any, *paths: str) -> float | None:
    """The first of ``paths`` (dotted) that holds a number."""
    for path in paths:
        found = _number(dig(d, path))
        if found is not None:
            return found
    return None


def _leaves(d: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _leaves(v, f"{prefix}{k}.".lower())
    else:
        yield prefix.rstrip("."), d


def scan(d: Any, *words: str, without: tuple[str, ...] = ()) -> float | None:
    """The first number whose dotted path contains every one of ``words`` (any of the
    spellings joined by "|") and none of ``without``."""
    for path, value in _leaves(d):
        if all(any(w in path for w in word.split("|")) for word in words) and not any(
            w in path for w in without
        ):
            found = _number(value)
            if found is not None:
                return found
    return None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def fmt(x: float | None, unit: str = "") -> str:
    if x is None:
        return "n/a"
    text = f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
    return f"{text} {unit}".rstrip()


# ── rows per benchmark ────────────────────────────────────────────────────────────────


def drivers(ingest: Any) -> list[tuple[str, dict[str, Any]]]:
    """``ingest.drivers`` as (driver, numbers), whether written as a dict or a list."""
    d = dig(ingest, "drivers")
    if isinstance(d, dict):
        return [(str(k), v) for k, v in d.items() if isinstance(v, dict)]
    if isinstance(d, list):
        return [
            (str(v.get("driver") or v.get("name") or i), v)
            for i, v in enumerate(d)
            if isinstance(v, dict)
        ]
    return []


def ingest_rows(run: dict[str, Any]) -> list[Row]:
    i = run.get("ingest", {})
    prod = num(i, "producer_ceiling_events_per_s")
    copy = num(i, "copy_ceiling_rows_per_s")
    noop = scan(i, "noop|no_op", "per_s")
    batch = num(i, "producer_batch_api_events_per_s")
    rows = [
        Row("ceiling: aiokafka producer alone", prod, "ev/s"),
        Row("  the same producer, batch API (as we send)", batch, "ev/s"),
        Row("ceiling: asyncpg COPY alone", copy, "rows/s"),
        Row("no-op faust agent (the framework alone)", noop, "ev/s", f"producer {fmt(prod)}",
            ratio(noop, prod)),
    ]  # fmt: skip
    # Before results.json had ``drivers``: its top-level numbers are the default driver's.
    per = drivers(i) or [("default", i)]
    for name, d in per:
        e2e = num(d, "end_to_end_events_per_s", "events_per_s", "e2e_events_per_s")
        drain = num(d, "processor_drain_events_per_s", "drain_events_per_s")
        target = f"producer {fmt(prod)} (target ≥ {INGEST_TARGET_RATIO:.1f}x)"
        rows += [
            Row(f"ingest end to end, {name} driver", e2e, "ev/s", target, ratio(e2e, prod)),
            Row(f"  (same) vs asyncpg COPY, {name}", e2e, "ev/s", f"COPY {fmt(copy)}",
                ratio(e2e, copy)),
            Row(f"  processor draining a backlog, {name}", drain, "ev/s",
                f"no-op faust {fmt(noop)}" if name == "faust" else f"producer {fmt(prod)}",
                ratio(drain, noop if name == "faust" else prod)),
            Row(f"  processor CPU per event, {name}",
                num(d, "processor_cpu_us_per_event"), "µs"),
        ]  # fmt: skip
    return rows


def floor_rows(f: dict[str, Any]) -> list[Row]:
    """The libraries' CPU per ingested event beside each ingest target's budget."""
    floor, budget = num(f, "processor_floor_us"), num(f, "faust_budget_us")
    e2e, e2e_budget = num(f, "e2e_floor_us"), num(f, "e2e_budget_us")
    sign, check = num(f, "envelope_sign_us"), num(f, "envelope_verify_us")
    return [
        Row("ingest floor: library CPU per event in the processor", floor, "µs",
            f"faust target's budget {fmt(budget)} µs", ratio(floor, budget)),
        Row("ingest floor: SDK + processor library CPU per event", e2e, "µs",
            f"aiokafka target's budget {fmt(e2e_budget)} µs", ratio(e2e, e2e_budget)),
        Row("envelope: the runtime signs a message", sign, "µs",
            f"before issue 38: {ENVELOPE_BEFORE_US[0]} µs", ratio(sign, ENVELOPE_BEFORE_US[0])),
        Row("envelope: the processor checks it", check, "µs",
            f"before issue 38: {ENVELOPE_BEFORE_US[1]} µs", ratio(check, ENVELOPE_BEFORE_US[1])),
    ]  # fmt: skip


def size_rows(d: Any) -> dict[int, dict[str, Any]]:
    """Rows by their record count, from a list of rows, a {"rows"|"sizes": [...]} or a
    {"10000": {...}} object."""
    if isinstance(d, dict):
        for key in ("rows", "sizes", "prepare"):
            if isinstance(d.get(key), list | dict):
                return size_rows(d[key])
        return {int(k): v for k, v in d.items() if k.isdigit() and isinstance(v, dict)}
    out: dict[int, dict[str, Any]] = {}
    for row in d if isinstance(d, list) else []:
        size = _number(row.get("size", row.get("records"))) if isinstance(row, dict) else None
        if size is not None:
            out[int(size)] = row
    return out


def near(rows: dict[int, dict[str, Any]], size: int) -> dict[str, Any]:
    """The row measured at ``size`` records (within 10%: a thread is a few records
    longer than asked once its run lifecycle is in)."""
    best = min(rows, key=lambda n: abs(n - size), default=None)
    return rows[best] if best is not None and abs(best - size) <= size // 10 else {}


WARM = ("warm_p99_ms", "warm.p99_ms", "warm.server_p99_ms", "ours_p99_ms", "server_p99_ms")
# The restart path (a stored render state read back) is the one the targets are for.
COLD = ("cold_restart_p99_ms", "cold_p99_ms", "cold.restart_p99_ms", "restart_p99_ms")
COLD_TARGET = ("target_p99_ms", "cold_target_ms", "cold.target_ms")


def prepare_rows(data: dict[str, Any]) -> list[Row]:
    """Cold and warm p99 at 10k and 100k records: ``prepare_cold.json`` first, then
    ``prepare_scale.json``, then ``benchmarks.run``'s warm prepares."""
    sources = [size_rows(data["prepare_cold"]), size_rows(data["prepare_scale"])]
    sources.append(size_rows(data["run"].get("prepare", [])))
    rows = []
    for size in (10_000, 100_000):
        found = [near(s, size) for s in sources]
        warm = next((v for r in found if (v := num(r, *WARM)) is not None), None)
        cold = next((v for r in found if (v := num(r, *COLD)) is not None), None)
        target = next(
            (v for r in found if (v := num(r, *COLD_TARGET)) is not None),
            COLD_TARGET_MS[size],
        )
        summarized = next(
            (v for r in found if (v := num(r, "cold_summarized_p99_ms")) is not None), None
        )
        full = next((v for r in found if (v := num(r, "cold_full_p99_ms")) is not None), None)
        rows += [
            Row(f"cold prepare p99, {size:,} records, no summary, from its stored state",
                cold, "ms", f"≤ {fmt(target)} ms", ratio(cold, target)),
            Row(f"cold prepare p99, {size:,} records, no summary, full render (new epoch)",
                full, "ms", f"≤ {fmt(target)} ms", ratio(full, target)),
            Row(f"cold prepare p99, {size:,} records, summary over all but 2,000", summarized,
                "ms", f"≤ {fmt(target)} ms", ratio(summarized, target)),
            Row(f"warm prepare p99, {size:,} records", warm, "ms", f"cold {fmt(cold, 'ms')}",
                ratio(warm, cold)),
        ]  # fmt: skip
    return rows


def compaction_rows(data: dict[str, Any]) -> list[Row]:
    thr = data["throughput"]
    rate = {
        int(w["workers"]): _number(w.get("jobs_per_s"))
        for w in thr.get("workers", [])
        if isinstance(w, dict) and _number(w.get("workers")) is not None
    }
    one, two = rate.get(1), rate.get(2)
    rows = [
        Row("compaction throughput, 1 worker process", one, "jobs/s"),
        Row("compaction throughput, 2 worker processes", two, "jobs/s",
            f"1 worker {fmt(one)} (2x ideal)", ratio(two, one)),
    ]  # fmt: skip
    cmp = data["compaction"]
    variants = [v for v in dig(cmp, "overhead.variants") or [] if isinstance(v, dict)]
    extractive = next(
        (v for v in variants if v.get("gateway") == "extractive" and v.get("max_calls") == 4),
        {},
    )
    overhead = num(extractive, "overhead_p99_ms")
    target = num(cmp, "overhead.target_overhead_ms") or 50.0
    calls = num(cmp, "steady.model_calls_per_1000_events")
    naive = num(cmp, "steady.naive_calls_per_1000_events")
    rows += [
        Row("compaction overhead excl. model p99 (extractive, 100k tokens)", overhead, "ms",
            f"≤ {fmt(target)} ms", ratio(overhead, target)),
        Row("summarizer calls per 1,000 events at a steady 82% load", calls, "",
            f"naive {fmt(naive)}", ratio(calls, naive)),
    ]  # fmt: skip
    return rows


def analytics_rows(a: dict[str, Any]) -> list[Row]:
    rate, prod = num(a, "analytics_per_s"), num(a, "producer_ceiling_per_s")
    base = scan(a, "p99", "without")
    loaded = scan(a, "p99", "with", without=("without", "ratio"))
    p99_ratio = scan(a, "p99", "ratio") or ratio(loaded, base)
    return [
        Row("analytics rollups", rate, "ev/s", f"producer {fmt(prod)}", ratio(rate, prod)),
        Row("prepare p99 with the analytics group running", loaded, "ms",
            f"without {fmt(base, 'ms')}", p99_ratio),
    ]  # fmt: skip


def long_session_rows(s: dict[str, Any]) -> list[Row]:
    q = num(s, "questions")
    label = f"long session ({fmt(q)} questions)"
    return [
        Row(f"{label}: prepares refused", num(s, "prepares_refused"), "", "0"),
        Row(f"{label}: max prepared share of InputBudget", num(s, "max_prepared_ratio"), "",
            "≤ 1.00"),
        Row(f"{label}: summaries over their bound", num(s, "summaries_over_bound"), "", "0"),
        Row(f"{label}: last summary vs median of first ten", num(s, "summary_last_tokens"),
            "tokens", f"median {fmt(num(s, 'summary_median_first_ten'))}",
            num(s, "summary_last_vs_median_first_ten")),
        Row(f"{label}: summarizer calls per 1,000 events",
            num(s, "summarizer_calls_per_1000_events")),
        Row(f"{label}: a question, median, last tenth", num(s, "question_s_last_tenth"), "s",
            f"first tenth {fmt(num(s, 'question_s_first_tenth'), 's')}",
            num(s, "question_s_growth")),
    ]  # fmt: skip


def fidelity_rows(f: dict[str, Any]) -> list[Row]:
    caps: dict[str, Any] = f["caps"] if isinstance(f.get("caps"), dict) else {}
    tight = sorted((k for k in caps if k.isdigit()), key=int)
    rollups = sorted((k for k in caps if k.startswith("roll-up x")), key=lambda k: int(k[9:]))
    rows = []
    if tight or not rollups:
        cap = tight[0] if tight else "n/a"
        ours = num(caps, f"{cap}.ours.recall")
        for other in ("masking", "truncation"):
            theirs = num(caps, f"{cap}.{other}.recall")
            label = f"summary fidelity: fact recall at a {cap}-token cap, ours vs {other}"
            rows.append(Row(label, ours, "", f"{other} {fmt(theirs)}", ratio(ours, theirs)))
    if rollups:
        k = rollups[-1]
        ours, theirs = num(caps, f"{k}.ours.recall"), num(caps, f"masking@{k[8:]}.recall")
        rows.append(
            Row(f"summary fidelity: fact recall after {k}, ours vs masking", ours, "",
                f"masking {fmt(theirs)}", ratio(ours, theirs))
        )  # fmt: skip
    return rows


def cost_rows(c: dict[str, Any]) -> list[Row]:
    """Issue 27: cost per question and steady cacheable share, ours vs the references."""
    ours = num(c, "policies.ours.cost_per_question_usd")
    rows = [
        Row("cost: steady cacheable share, ours", num(c, "policies.ours.steady_cacheable_share"),
            "", "≥ 0.90"),
    ]  # fmt: skip
    model = num(c, "policies.ours, model summarizer.cost_per_question_usd")
    for name, value in (("ours", ours), ("ours with a model summarizer", model)):
        for other in ("truncate", "langchain"):
            theirs = num(c, f"policies.{other}.cost_per_question_usd")
            rows.append(
                Row(f"cost per question, {name} vs {other}", value, "USD",
                    f"{other} {fmt(theirs)}", ratio(value, theirs))
            )  # fmt: skip
    return rows


def real_transcripts_rows(r: dict[str, Any]) -> list[Row]:
    """Issue 36: facts of public agent transcripts kept by ours vs masking at our budget."""
    one, late = "one_shot.rows", "after_10_rollups.rows"
    ours, masked = num(r, f"{one}.all facts.ours"), num(r, f"{one}.all facts.masking@B")
    same = num(r, "one_shot_same_transcripts.rows.all facts.ours")
    rolled = num(r, f"{late}.all facts.ours")
    return [
        Row("real transcripts: facts kept one-shot, ours vs masking at our budget", ours, "",
            f"≥ 0.80; masking {fmt(masked)}", ratio(ours, masked)),
        Row("real transcripts: summary tokens, share of what it covers",
            num(r, "one_shot.token_share.ours"), "", "≤ 0.15"),
        Row("real transcripts: the user's requests kept one-shot",
            num(r, f"{one}.kind: request.ours"), "", "≥ 0.90"),
        Row("real transcripts: facts kept after >= 10 roll-ups vs one-shot", rolled, "",
            f"one-shot {fmt(same)}", ratio(rolled, same)),
    ]  # fmt: skip


def frontier_rows(f: dict[str, Any]) -> list[Row]:
    """Issues 24 and 36: ours's recall of the last five decisions and of the open
    questions on the synthetic session, the worst seed; binding only where the agent
    records them (cue words no longer give them a share of the summary)."""
    rows = []
    for variant, targets in (
        ("recorded", ("≥ 0.90", "≥ 0.80")),
        ("phrasing only", ("info (≥ 0.90 in issue 24)", "info (≥ 0.80 in issue 24)")),
    ):
        for name, target in (
            ("decisions recall", targets[0]),
            ("decisions recall after >=10 roll-ups", targets[0]),
            ("open questions recall", targets[1]),
            ("open questions recall after >=10 roll-ups", targets[1]),
        ):
            rows.append(
                Row(f"frontier ({variant}): {name}, worst seed",
                    num(f, f"variants.{variant}.worst_seed.{name}"), "", target)
            )  # fmt: skip
    return rows


def frontier_blind_rows(f: dict[str, Any]) -> list[Row]:
    """Issue 36: decisions and open questions worded with no cue word, per language."""
    results = f.get("results") if isinstance(f.get("results"), list) else []
    rows = []
    for res in results or [{"language": "en"}, {"language": "zh"}]:
        lang = res.get("language", "?")
        for name, target in (
            ("decisions kept", "≥ 0.90"),
            ("open questions kept", "≥ 0.80"),
            ("wrongly closed", "0"),
            ("answered still open", "≤ 0.10"),
        ):
            rows.append(
                Row(f"phrasing-blind frontier ({lang}): {name}",
                    num(res, f"rows.{name}.ours"), "", target)
            )  # fmt: skip
    return rows


def agents_rows(a: dict[str, Any]) -> list[Row]:
    """Issue 37: K agents sharing one runtime process (``benchmarks.agents``), per K."""
    levels = a.get("levels") if isinstance(a.get("levels"), list) else []
    rows = []
    for lv in levels or [{"agents": 48}]:
        k = int(_number(lv.get("agents")) or 0)
        model = _number(lv.get("model_ms")) or 0
        rate, p99 = num(lv, "steps_per_s"), num(lv, "prepare_p99_ms")
        cpu = num(lv, "cpu_ms_per_step.ours")
        # Agents that wait for a model between calls offer the load their pace gives, and
        # below saturation a step also carries the machine's idle work: the steps/s and
        # CPU targets are the saturated machine's (no model time).
        steps_target = AGENTS_STEPS_TARGET if k == 48 and not model else None
        cpu_target = None if model else AGENTS_CPU_TARGET_MS
        p99_target = AGENTS_P99_TARGET_MS.get(k)
        name = f"{k} agents" + (f", model {model:g} ms a call" if model else "")
        rows += [
            Row(f"{name}: agent steps/s", rate, "/s",
                f"≥ {fmt(steps_target)}" if steps_target else "",
                ratio(rate, steps_target)),
            Row(f"{name}: prepare p99 (the agent's wait)", p99, "ms",
                f"≤ {fmt(p99_target)} ms" if p99_target else "", ratio(p99, p99_target)),
            Row(f"{name}: CPU per agent step, our processes", cpu, "ms",
                f"≤ {fmt(cpu_target)} ms" if cpu_target else "", ratio(cpu, cpu_target)),
            Row(f"{name}: errors", num(lv, "errors"), "", "0"),
        ]  # fmt: skip
    return rows


# ── output ────────────────────────────────────────────────────────────────────────────


def build(data: dict[str, Any]) -> list[Row]:
    """Every row, in the table's order; ``data`` as ``load`` returns it (any source may
    be {})."""
    data = {name: data.get(name) or {} for name in SOURCES}
    return [
        *ingest_rows(data["run"]),
        *floor_rows(data["floor"]),
        *prepare_rows(data),
        *compaction_rows(data),
        *analytics_rows(data["analytics"]),
        *long_session_rows(data["long_session"]),
        *fidelity_rows(data["fidelity"]),
        *cost_rows(data["cost"]),
        *real_transcripts_rows(data["real_transcripts"]),
        *frontier_rows(data["frontier"]),
        *frontier_blind_rows(data["frontier_blind"]),
        *agents_rows(data["agents"]),
    ]


def markdown(rows: list[Row]) -> str:
    lines = ["| measure | value | ceiling or target | ratio |", "|---|---:|---:|---:|"]
    for r in rows:
        missing = r.value is None or "n/a" in r.ceiling
        shown = f"{r.ratio:.2f}" if r.ratio is not None else ("n/a" if missing else "")
        lines.append(f"| {r.measure} | {fmt(r.value, r.unit)} | {r.ceiling} | {shown} |")
    return "\n".join(lines)


def main() -> None:
    data = load(OUT)
    rows = build(data)
    print("\n## make bench: summary\n")
    print(markdown(rows))
    missing = [SOURCES[n] for n, d in data.items() if not d]
    if missing:
        print(f"\n(not found or unreadable in {OUT}: {', '.join(missing)})")
    OUT.mkdir(parents=True, exist_ok=True)
    report = {"rows": [asdict(r) for r in rows], "missing_sources": missing}
    (OUT / "summary.json").write_text(json.dumps(report, indent=2))
    print(f"\n[bench-summary] wrote {OUT / 'summary.json'}")


if __name__ == "__main__":
    main()
