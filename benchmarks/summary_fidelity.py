"""``python -m benchmarks.summary_fidelity``: what survives compaction (issue 16).

Seeded synthetic coding-agent sessions with planted facts (``benchmarks.fidelity_sessions``:
twelve sessions of 4-6 runs, ~16k tokens each) are compacted in process through the
compaction worker's own code: ``build_groups``, ``current_task_ids``, ``select_prefix``,
``segment`` (max 4 calls), ``sources.source_items``, ``BoundedSummarizer.summarize`` (the
call and ``validate_draft``), ``sources.merge_drafts``, ``BoundedSummarizer.roll_up``,
``fit_draft``, ``sources.merge_ranges`` and ``check_coverage`` — 6,000-token segments,
two recent groups kept, at three output caps (400, the default 800, 1,600). No Kafka or PostgreSQL.

In the same run two baselines get the same covered records and exactly the summary's
token budget (tiktoken cl100k): **observation masking** (every user and assistant
message and tool call kept, every tool output replaced by a placeholder, the oldest
messages dropped until it fits) and **recent-message truncation** (whole messages,
newest first, as LangChain ``trim_messages(strategy="last")``). A fact is kept when its
probe is in the kept text; for the summary it is *cited* when a line holding it cites a
record the fact was planted in.

**Roll-ups**: the same sessions compacted incrementally — a job after every model step,
each job's parent the previous summary — with the summary bound set to the one-shot
summary's size, so once the chain reaches that size every job re-summarizes the parent
(R11.8). Recall over the facts covered so far is taken at the 1st, 3rd and 10th
roll-up, with observation masking at the same point and budget.

When ``ALC_SUMMARIZER_BASE_URL`` and ``ALC_SUMMARIZER_MODEL`` are set, the
OpenAI-compatible summarizer is scored at the default cap too (a job it fails is
reported and not scored); otherwise it prints "skipped: no model endpoint configured".
Prints the tables, recall per planted kind (paths, errors, numbers, decisions, open
questions, constraints, identifiers) one-shot and after 1, 3 and 10 roll-ups beside
masking at the same budget, and issues 16 and 24's targets with ok/FAIL (decisions and
open questions >= 75% one-shot; after ten roll-ups, recall >= masking's); writes
``build/bench/summary_fidelity.json`` (the roll-up rows at the default cap also as
``caps["roll-up xK"]`` / ``caps["masking@xK"]``, as ``benchmarks.summary`` reads them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.fidelity_sessions import Planted, Session, make_session
from domain.compaction.bound import fit_draft, summary_bound
from domain.compaction.drafts import SummaryDraft, SummaryRequest
from domain.compaction.errors import InvalidSummary, SummarizerFailed
from domain.compaction.gateway import SummaryGateway
from domain.compaction.sources import merge_drafts, merge_ranges, source_items
from domain.compaction.validate import check_coverage
from domain.context.rendering import RecordView
from domain.context.selection import (
    build_groups,
    current_task_ids,
    segment,
    select_prefix,
)
from domain.context.tokens import CachedCounter
from domain.window.budget import ModelProfile
from schemas.settings import Settings
from services.compaction.extractive import ExtractiveSummarizer
from services.compaction.openai_compat import OpenAICompatibleSummarizer
from services.compaction.summarize import BoundedSummarizer
from storage.tokenizers import make_counter

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "bench"
CAPS = (400, 800, 1600)
DEFAULT_CAP = 800
SEGMENT_TOKENS = 6000
KEEP_RECENT = 2
MAX_CALLS = 4  # policy compaction.max_compaction_calls default
ROLLUPS = (1, 3, 10)
# One-shot jobs: the bound of a 128k profile at summary_max_ratio 0.15 — never reached here.
BIG = ModelProfile("m-128k", 131_072, 8_192, 2_048)
ONE_SHOT_BOUND = summary_bound(0.15, BIG.input_budget())
KINDS = ("path", "error", "numeric", "decision", "question", "constraint", "identifier")
KIND_LABELS = {"decision": "decisions", "question": "open questions"}  # as the issue says
WHERE = ("user", "assistant", "arguments", "output_head", "output_tail", "error")
_IDS = re.compile(r"\[([^\[\]]+)\]\s*$")


def norm(text: str) -> str:
    return " ".join(text.split()).lower()


# --- the worker's code path -----------------------------------------------------------


@dataclass
class Summary:
    draft: SummaryDraft
    covered: set[str]
    ranges: tuple[tuple[int, int], ...]
    rollups: int = 0
    tokens: int = 0


class MemoCounter:
    """tiktoken cl100k, memoized by text: the benchmark counts the same texts often."""

    def __init__(self) -> None:
        self._inner = make_counter("cl100k_base")
        self.method = self._inner.method
        self._memo: dict[str, int] = {}

    def count(self, text: str) -> int:
        n = self._memo.get(text)
        if n is None:
            n = self._memo[text] = self._inner.count(text)
        return n


@dataclass
class Pipeline:
    gateway: SummaryGateway
    counter: MemoCounter
    output_tokens: int
    summarizer: BoundedSummarizer = field(init=False)

    def __post_init__(self) -> None:
        self.count = self.counter.count
        self.summarizer = BoundedSummarizer(
            self.gateway, CachedCounter(self.counter), SEGMENT_TOKENS, 600.0
        )

    async def job(
        self, records: Sequence[RecordView], run_id: str, parent: Summary | None, bound: int
    ) -> Summary | None:
        """One compaction job, as ``CompactionWorker._run`` does it (no database)."""
        before = parent.covered if parent else set()
        view = [r for r in records if r.record_id not in before]
        pinned = current_task_ids(view, run_id)
        selection = select_prefix(build_groups(view), keep_recent=KEEP_RECENT, pinned=pinned)
        if not selection.covered:
            return None
        output_tokens = min(self.output_tokens, bound)
        segments = segment(selection.covered, SEGMENT_TOKENS)[:MAX_CALLS]
        by_id = {r.record_id: r for r in view}
        previous = parent.draft.text()[: bound * 4] if parent else None
        drafts = []
        for i, seg in enumerate(segments):
            req = SummaryRequest(source_items(seg, by_id), previous, output_tokens, f"bench:{i}")
            drafts.append(await self.summarizer.summarize(req))  # the call and validate_draft
        merged = merge_drafts(parent.draft.to_dict() if parent else None, drafts)
        rolled = 0
        if self.count(merged.text()) > bound:
            merged, _, info = await self.summarizer.roll_up(merged, bound, "bench", None)
            assert info.error is None, info
            rolled = 1
        merged, _ = fit_draft(merged, bound, self.count)
        covered = [g for s in segments for g in s.groups]
        new = {i for g in covered for i in g.record_ids}
        ranges = merge_ranges(covered, parent.ranges if parent else ())
        check_coverage(
            merged, {i: by_id[i].session_sequence for i in new}, ranges, earlier=frozenset(before)
        )
        return Summary(
            merged,
            before | new,
            ranges,
            (parent.rollups if parent else 0) + rolled,
            self.count(merged.text()),
        )


# --- baselines ------------------------------------------------------------------------


def _messages(records: Sequence[RecordView], masked: bool) -> list[str]:
    out = []
    for r in records:
        if r.kind in ("user_input", "supplement"):
            out.append(f"user: {r.text}")
        elif r.kind == "assistant_message":
            calls = "".join(
                f"\ncall {c['name']}({c['arguments_json']})"
                for c in r.payload.get("tool_calls", [])
            )
            out.append(f"assistant: {r.text}{calls}")
        elif r.kind == "tool_outcome":
            name, status = r.payload.get("name"), r.payload.get("status")
            body = f"[output omitted, {len(r.text)} chars]" if masked else r.text
            out.append(f"tool {name} ({status}): {body}")
    return out


def trim_last(messages: list[str], budget: int, count: Callable[[str], int]) -> str:
    """Newest whole messages that fit ``budget`` tokens (``trim_messages``, "last")."""
    kept: list[str] = []
    used = 0
    for m in reversed(messages):
        t = count(m) + 4  # the per-message envelope
        if used + t > budget:
            break
        kept.append(m)
        used += t
    return "\n".join(reversed(kept))


# --- scoring --------------------------------------------------------------------------


@dataclass
class Fact:
    planted: Planted
    probe: str  # normalized
    sources: frozenset[str]


def facts_of(session: Session, covered: set[str]) -> list[Fact]:
    """Planted facts with at least one covered record holding the probe."""
    texts = {r.record_id: norm(_record_text(r)) for r in session.records}
    out = []
    for p in session.facts:
        probe = norm(p.probe)
        sources = frozenset(rid for rid, t in texts.items() if probe in t)
        if sources & covered:
            out.append(Fact(p, probe, sources))
    return out


def _record_text(r: RecordView) -> str:
    calls = r.payload.get("tool_calls") or []
    return "\n".join([r.text, *(c["arguments_json"] for c in calls)])


@dataclass
class Score:
    samples: int = 0  # sessions (or points of a session) scored
    failed: int = 0  # jobs that failed at the summarizer or validation: not scored
    facts: int = 0
    kept: int = 0
    cited: int = 0
    tokens: int = 0
    covered_tokens: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    kind_total: Counter[str] = field(default_factory=Counter)
    by_where: Counter[str] = field(default_factory=Counter)
    where_total: Counter[str] = field(default_factory=Counter)

    def add(
        self, facts: list[Fact], text: str, tokens: int, covered_tokens: int, cite: bool
    ) -> None:
        flat = norm(text)
        lines = [(norm(line), _cited_ids(line)) for line in text.splitlines()] if cite else []
        self.samples += 1
        self.tokens += tokens
        self.covered_tokens += covered_tokens
        for f in facts:
            self.facts += 1
            self.kind_total[f.planted.kind] += 1
            self.where_total[f.planted.where] += 1
            if f.probe not in flat:
                continue
            self.kept += 1
            self.by_kind[f.planted.kind] += 1
            self.by_where[f.planted.where] += 1
            if any(f.probe in line and ids & f.sources for line, ids in lines):
                self.cited += 1

    def row(self) -> dict[str, Any]:
        def share(a: int, b: int) -> float | None:
            return round(a / b, 3) if b else None

        return {
            "samples": self.samples,
            "facts": self.facts,
            "recall": share(self.kept, self.facts),
            "kept_tokens": self.tokens,
            "kept_share_of_covered": share(self.tokens, self.covered_tokens),
            "facts_per_1k_tokens": round(1000 * self.kept / self.tokens, 1) if self.tokens else 0,
            "cited_share": share(self.cited, self.kept),
            "recall_by_kind": {k: share(self.by_kind[k], self.kind_total[k]) for k in KINDS},
            "recall_by_where": {w: share(self.by_where[w], self.where_total[w]) for w in WHERE},
        }


def _cited_ids(line: str) -> frozenset[str]:
    m = _IDS.search(line)
    return frozenset(x.strip() for x in m.group(1).split(",")) if m else frozenset()


# --- runs -----------------------------------------------------------------------------


def _covered_tokens(records: Sequence[RecordView], covered: set[str]) -> int:
    return sum(r.token_count for r in records if r.record_id in covered)


async def one_shot(
    sessions: list[Session], gateway: SummaryGateway, cap: int, counter: MemoCounter
) -> tuple[dict[str, Score], list[int]]:
    """Each session compacted once at its end; baselines at the summary's budget."""
    pipe = Pipeline(gateway, counter, cap)
    count = counter.count
    scores = {"ours": Score(), "masking": Score(), "truncation": Score()}
    sizes = []
    for s in sessions:
        try:
            summary = await pipe.job(s.records, s.records[-1].run_id or "", None, ONE_SHOT_BOUND)
        except (InvalidSummary, SummarizerFailed, TimeoutError) as exc:
            # The worker would fail the job and keep the records verbatim: not scored.
            scores["ours"].failed += 1
            why = getattr(exc, "details", {}).get("reason") or type(exc).__name__
            print(f"  session {s.session_id}: the job failed ({why})")
            sizes.append(0)
            continue
        assert summary is not None
        facts = facts_of(s, summary.covered)
        covered_recs = [r for r in s.records if r.record_id in summary.covered]
        ct = _covered_tokens(s.records, summary.covered)
        budget = summary.tokens
        sizes.append(budget)
        scores["ours"].add(facts, summary.draft.text(), budget, ct, cite=True)
        for name, masked in (("masking", True), ("truncation", False)):
            text = trim_last(_messages(covered_recs, masked), budget, count)
            scores[name].add(facts, text, count(text), ct, cite=False)
    return scores, sizes


async def rolling(
    sessions: list[Session], sizes: list[int], cap: int, counter: MemoCounter
) -> dict[int, dict[str, Score]]:
    """Incremental compaction with roll-ups at a bound equal to the one-shot size."""
    pipe = Pipeline(ExtractiveSummarizer(), counter, cap)
    count = counter.count
    out: dict[int, dict[str, Score]] = {k: {"ours": Score(), "masking": Score()} for k in ROLLUPS}
    for s, bound in zip(sessions, sizes, strict=True):
        if not bound:
            continue
        parent: Summary | None = None
        taken: set[int] = set()
        for n, r in enumerate(s.records):
            if r.kind != "assistant_message":  # a job at every model step
                continue
            view = s.records[: n + 1]
            job = await pipe.job(view, r.run_id or "", parent, bound)
            if job is None:
                continue
            parent = job
            for k in ROLLUPS:
                if parent.rollups >= k and k not in taken:
                    taken.add(k)
                    facts = facts_of(s, parent.covered)
                    ct = _covered_tokens(s.records, parent.covered)
                    out[k]["ours"].add(facts, parent.draft.text(), parent.tokens, ct, cite=True)
                    covered_recs = [x for x in view if x.record_id in parent.covered]
                    text = trim_last(_messages(covered_recs, True), parent.tokens, count)
                    out[k]["masking"].add(facts, text, count(text), ct, cite=False)
    return out


def model_gateway() -> tuple[SummaryGateway | None, str]:
    settings = Settings()
    if not settings.summarizer_base_url:
        return None, "skipped: no model endpoint configured (ALC_SUMMARIZER_BASE_URL)"
    if not settings.summarizer_model:
        return None, "skipped: ALC_SUMMARIZER_MODEL is not set"
    gw = OpenAICompatibleSummarizer(
        settings.summarizer_base_url,
        settings.summarizer_model,
        settings.summarizer_key(),
        settings.summarizer_timeout_s,
    )
    return gw, f"model {settings.summarizer_model} at {settings.summarizer_base_url}"


# --- report ---------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def print_table(cap: int, rows: dict[str, dict[str, Any]]) -> None:
    print(f"\noutput cap {cap} tokens")
    cols = ("recall", "n", "kept tok", "of covered", "facts/1k", "cited")
    print(f"  {'method':<13}" + "".join(f"{c:>11}" for c in cols) + "  recall by kind")
    for name, row in rows.items():
        cited = "-" if name.startswith(("masking", "truncation")) else _pct(row["cited_share"])
        cells = (
            _pct(row["recall"]),
            str(row["samples"]),
            str(row["kept_tokens"]),
            _pct(row["kept_share_of_covered"]),
            str(row["facts_per_1k_tokens"]),
            cited,
        )
        kinds = " ".join(f"{k} {_pct(row['recall_by_kind'][k])}" for k in KINDS)
        print(f"  {name:<13}" + "".join(f"{c:>11}" for c in cells) + f"  {kinds}")
    first = next(iter(rows))
    where = rows[first]["recall_by_where"]
    print(f"  {first} by location: " + ", ".join(f"{w} {_pct(v)}" for w, v in where.items()))


def print_kinds(cap: int, rows: dict[str, dict[str, Any]]) -> None:
    """Recall per planted kind: one-shot and after each roll-up count, each beside
    observation masking at the same budget."""
    cols = [("one-shot", "ours", "masking")]
    cols += [(f"x{k}", f"roll-up x{k}", f"masking@x{k}") for k in ROLLUPS]
    print(f"\nrecall by kind at the {cap}-token cap (ours / masking at the same budget)")
    print(f"  {'kind':<16}" + "".join(f"{name:>15}" for name, _, _ in cols))
    for kind in (*KINDS, "all"):
        cells = []
        for _, ours, theirs in cols:
            a, b = (
                rows[key]["recall"] if kind == "all" else rows[key]["recall_by_kind"][kind]
                for key in (ours, theirs)
            )
            cells.append(f"{_pct(a)} / {_pct(b)}")
        print(f"  {KIND_LABELS.get(kind, kind):<16}" + "".join(f"{c:>15}" for c in cells))


def verdict(rows: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """Issues 16 and 24's bar, at the default cap."""
    ours, masking = rows["ours"], rows["masking"]
    last = ROLLUPS[-1]
    rolled, rolled_masking = rows[f"roll-up x{last}"], rows[f"masking@x{last}"]
    kinds = ours["recall_by_kind"]
    return {
        "recall >= observation masking at the same budget": ours["recall"] >= masking["recall"],
        "recall >= 75%": ours["recall"] >= 0.75,
        ">= 90% of kept facts cited with their source ids": (ours["cited_share"] or 0) >= 0.9,
        "decisions >= 75% (one-shot)": (kinds["decision"] or 0) >= 0.75,
        "open questions >= 75% (one-shot)": (kinds["question"] or 0) >= 0.75,
        f"recall after {last} roll-ups >= 50%": (rolled["recall"] or 0) >= 0.5,
        f"recall after {last} roll-ups >= observation masking at the same budget": (
            (rolled["recall"] or 0) >= (rolled_masking["recall"] or 0)
        ),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    counter = MemoCounter()
    started = time.perf_counter()
    sessions = [make_session(args.seed, i, counter.count) for i in range(args.sessions)]
    n_facts = sum(len(s.facts) for s in sessions)
    tokens = sum(r.token_count for s in sessions for r in s.records)
    print(
        f"summary fidelity: {len(sessions)} sessions (seed {args.seed}), {tokens} tokens,"
        f" {n_facts} planted facts ({1000 * n_facts / tokens:.1f} per 1,000 tokens);"
        f" segments of {SEGMENT_TOKENS} tokens, {KEEP_RECENT} recent groups kept"
    )
    print(
        "  roll-up xK: the same sessions compacted after every model step, bound = the"
        " one-shot summary's size, at the K-th roll-up (n = sessions that got there);"
        " masking@xK: masking at that point and budget"
    )
    result: dict[str, Any] = {
        "seed": args.seed,
        "sessions": len(sessions),
        "session_tokens": tokens,
        "planted_facts": n_facts,
        "planted_by_kind": dict(Counter(f.kind for s in sessions for f in s.facts)),
        "planted_by_where": dict(Counter(f.where for s in sessions for f in s.facts)),
        "caps": {},
    }
    for cap in args.caps:
        scores, sizes = await one_shot(sessions, ExtractiveSummarizer(), cap, counter)
        rows = {name: sc.row() for name, sc in scores.items()}
        rolled = await rolling(sessions, sizes, cap, counter)
        for k, sc in rolled.items():
            rows[f"roll-up x{k}"] = sc["ours"].row()
            rows[f"masking@x{k}"] = sc["masking"].row()
        print_table(cap, rows)
        result["caps"][str(cap)] = rows
    if str(DEFAULT_CAP) in result["caps"]:
        rows = result["caps"][str(DEFAULT_CAP)]
        print_kinds(DEFAULT_CAP, rows)
        for k in ROLLUPS:  # the roll-up headline as benchmarks.summary reads it
            result["caps"][f"roll-up x{k}"] = {"ours": rows[f"roll-up x{k}"]}
            result["caps"][f"masking@x{k}"] = rows[f"masking@x{k}"]
        checks = verdict(rows)
        result["targets"] = checks
        print(f"\ntargets at the default cap ({DEFAULT_CAP}):")
        for name, ok in checks.items():
            print(f"  {name:<72} {'ok' if ok else 'FAIL'}")
    result["model"] = await score_model(sessions, counter)
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    return result


async def score_model(sessions: list[Session], counter: MemoCounter) -> dict[str, Any]:
    """The OpenAI-compatible summarizer through the same path, when configured."""
    gw, reason = model_gateway()
    if gw is None:
        print(f"\nOpenAI-compatible summarizer: {reason}")
        return {"skipped": reason}
    print(f"\nOpenAI-compatible summarizer ({reason}):")
    scores, _ = await one_shot(sessions, gw, DEFAULT_CAP, counter)
    rows = {("model" if name == "ours" else name): sc.row() for name, sc in scores.items()}
    print_table(DEFAULT_CAP, rows)
    return {"endpoint": reason, "rows": rows, "failed_jobs": scores["ours"].failed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--sessions", type=int, default=12)
    parser.add_argument("--caps", type=int, nargs="+", default=list(CAPS))
    args = parser.parse_args(argv)
    result = asyncio.run(main_async(args))
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "summary_fidelity.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {path.relative_to(REPO)} in {result['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
