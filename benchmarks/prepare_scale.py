"""``python -m benchmarks.prepare_scale``: the Prepare assembler at 1k / 10k / 100k records,
beside a naive baseline that recounts the whole history with tiktoken on every call.

Pure and in-process: no Kafka, no PostgreSQL. For each size a synthetic session is built
(earlier runs as inherited history, then the current run): user inputs, assistant
messages calling 1-3 tools, tool outcomes of 50-2,000 characters (log-uniform) mixing
prose, code, JSON and logs, about 1 in 100 of them a large result (16k-48k characters,
over the 4,000-token inline limit) and final answers. Token counts are computed once, at
"ingest", from the same text the session processor counts (``domain.accounting``).

Then the agent loop is simulated: K times, 2 new records (an assistant message calling a
tool, and its outcome) are appended and the context is prepared, both ways, on the same
state:

- **ours**: what ``services/prepare/service.py`` does per prepare once its view is cached
  — the cached ``ThreadRenderer`` is fed only the new records, pending calls are checked,
  then ``assemble(...)`` and ``enforce(report)``, with the service's hash-keyed
  ``CachedCounter``;
- **naive**: the message list is rebuilt from every record and every message is counted
  again with tiktoken (no cache), plus the instructions, skill catalog and tool schemas,
  then the total is compared with the budget. Large results get the same preview view, so
  both sides estimate the same messages (both estimates are printed).

Prints a table and writes ``build/bench/prepare_scale.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import math
import os
import platform
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import prepare_cold
from domain.context.assemble import assemble
from domain.context.rendering import Message, RecordView, ThreadRenderer
from domain.context.tokens import CachedCounter, TokenCounter
from domain.policy.context_policy import LargeResultSettings
from domain.window.budget import ModelProfile, enforce
from schemas.settings import Settings
from storage.tokenizers import make_counter

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "bench"
ENCODING = "cl100k_base"
# Big enough for 100k records (~13M tokens) so neither side raises: the point is the cost
# of preparing, not the budget decision.
PROFILE = ModelProfile(
    name="bench-scale",
    context_capacity=1_000_000_000,
    output_reserve=8192,
    safety_margin=4096,
)
LARGE = LargeResultSettings()
INSTRUCTIONS = (
    "You are a careful software engineering agent. Work in small steps, read files before "
    "editing them, run the tests after every change and report what you did and why. "
    "Never invent tool results; when a result is unknown, say so and ask.\n" * 6
)
SKILL_BINDINGS: list[dict[str, Any]] = [
    {"name": "python-refactor", "version": "3", "description": "Safe refactors in Python"},
    {"name": "sql-review", "version": "1", "description": "Review SQL migrations"},
    {"name": "release-notes", "version": "2", "description": "Write release notes"},
]
TOOL_NAMES = ("read_file", "search_code", "run_tests", "list_dir", "http_get", "write_file")
TOOLS: list[dict[str, Any]] = [
    {
        "name": name,
        "description": f"{name.replace('_', ' ')} in the workspace; returns text",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "workspace-relative path"},
                "query": {"type": "string", "description": "what to look for"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
            },
            "required": ["path"],
        },
    }
    for name in TOOL_NAMES
]
DEFAULT_SIZES = "1000,10000,100000"
DEFAULT_CALLS = "200,100,30"
DEFAULT_NAIVE_CALLS = "200,40,8"


def log(msg: str) -> None:
    print(f"[bench-prepare-scale] {msg}", flush=True)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


# ── synthetic session ────────────────────────────────────────────────────────────────

_WORD_TEXT = (
    "the a file function returns value error request response user model tool result "
    "thread record budget session run test passes fails because when then with without "
    "index query table column cache view message context summary window limit offset "
    "config release policy worker stream partition commit retry timeout latency"
)
_WORDS = tuple(_WORD_TEXT.split())


def _corpus(rng: random.Random, size: int) -> str:
    """Varied text to cut records from: prose, Python, JSON, log lines, listings."""
    parts: list[str] = []
    n = 0
    while n < size:
        kind = rng.randrange(5)
        if kind == 0:
            s = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 40))).capitalize()
            piece = s + ". "
        elif kind == 1:
            fn = f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}"
            piece = (
                f"def {fn}(self, {rng.choice(_WORDS)}: int = {rng.randint(0, 99)}) -> str:\n"
                f"    if {rng.choice(_WORDS)} > {rng.randint(1, 500)}:\n"
                f"        return self.{rng.choice(_WORDS)}[{rng.randint(0, 9)}]\n"
                f"    raise ValueError('{rng.choice(_WORDS)} {rng.choice(_WORDS)}')\n"
            )
        elif kind == 2:
            obj: dict[str, Any] = {
                rng.choice(_WORDS): rng.randint(0, 10**6) for _ in range(rng.randint(2, 6))
            }
            obj["id"] = f"{rng.getrandbits(48):012x}"
            piece = json.dumps(obj) + "\n"
        elif kind == 3:
            piece = (
                f"2025-0{rng.randint(1, 9)}-{rng.randint(10, 28)}T{rng.randint(10, 23)}:"
                f"{rng.randint(10, 59)}:{rng.randint(10, 59)}Z {rng.choice(('INFO', 'WARN'))}"
                f" {rng.choice(_WORDS)}.{rng.choice(_WORDS)} took {rng.random() * 900:.1f}ms"
                f" rows={rng.randint(0, 5000)}\n"
            )
        else:
            piece = "".join(
                f"src/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}_{rng.randint(0, 99)}.py"
                f"  {rng.randint(100, 99999)} bytes\n"
                for _ in range(rng.randint(2, 8))
            )
        parts.append(piece)
        n += len(piece)
    return "".join(parts)


def token_text(kind: str, text: str, payload: dict[str, Any]) -> str:
    """The text the session processor counts at ingest (``domain.accounting.token_text``):
    the content, plus tool names and arguments for a model step, the tool name for a
    result."""
    parts = [text]
    if kind == "assistant_message":
        for c in payload.get("tool_calls") or ():
            parts += (c["name"], c["arguments_json"])
    elif kind == "tool_outcome":
        parts.append(payload["name"])
    return "\n".join(parts)


class Session:
    """Appends records in ``session_sequence`` order, counted once as ingest does."""

    def __init__(self, seed: int, counter: TokenCounter) -> None:
        self.rng = random.Random(seed)
        self.corpus = _corpus(self.rng, 1_500_000)
        self.counter = counter
        self.records: list[RecordView] = []
        self.run = 0
        self.calls = 0

    def _text(self, lo: int, hi: int) -> str:
        n = int(math.exp(self.rng.uniform(math.log(lo), math.log(hi))))
        off = self.rng.randrange(len(self.corpus) - n)
        return self.corpus[off : off + n]

    def _add(self, kind: str, authority: str, text: str, payload: dict[str, Any]) -> None:
        seq = len(self.records) + 1
        counted = token_text(kind, text, payload)
        self.records.append(
            RecordView(
                record_id=f"rec{seq:07d}",
                session_sequence=seq,
                run_id=f"run{self.run}",
                instance_id=f"inst{self.run}",
                kind=kind,
                authority=authority,
                text=text,
                payload=payload,
                token_count=self.counter.count(counted),
                content_sha256=hashlib.sha256(text.encode()).hexdigest(),
            )
        )

    def user(self) -> None:
        self._add("user_input", "user", self._text(20, 600), {"intent": "question"})

    def step(self, n_calls: int) -> None:
        """An assistant message calling ``n_calls`` tools, then their outcomes."""
        calls = []
        for _ in range(n_calls):
            self.calls += 1
            args: dict[str, Any] = {
                "path": f"src/{self.rng.choice(_WORDS)}.py",
                "limit": self.rng.randint(1, 900),
            }
            calls.append(
                {
                    "call_id": f"call{self.calls:07d}",
                    "name": self.rng.choice(TOOL_NAMES),
                    "arguments_json": json.dumps(args),
                }
            )
        self._add("assistant_message", "model", self._text(20, 400), {"tool_calls": calls})
        for c in calls:
            large = self.rng.random() < 0.01
            text = self._text(16_000, 48_000) if large else self._text(50, 2000)
            status = "error" if self.rng.random() < 0.05 else "ok"
            self._add(
                "tool_outcome",
                "tool",
                text,
                {"call_id": c["call_id"], "name": c["name"], "status": status},
            )

    def answer(self) -> None:
        self._add("assistant_message", "model", self._text(50, 1500), {"tool_calls": []})

    def question_round(self) -> None:
        self.user()
        for _ in range(self.rng.randint(1, 3)):
            self.step(self.rng.randint(1, 3))
        self.answer()


def build_session(n: int, seed: int, counter: TokenCounter) -> tuple[Session, int]:
    """Earlier runs (about 10 rounds each) up to ~n - 40 records, then the current run
    starting with a question. Returns the session and the first record of the current run."""
    s = Session(seed, counter)
    while len(s.records) < n - 40:
        if s.rng.random() < 0.1:
            s.run += 1
        s.question_round()
    s.run += 1
    start = len(s.records)
    s.user()
    if (n - len(s.records)) % 2:
        s.answer()
    while len(s.records) < n:
        s.step(1)  # 2 records each: exactly n, and no call left waiting
    return s, start


# ── the two ways of preparing ────────────────────────────────────────────────────────


def ours_renderer(
    records: list[RecordView], start: int, count: Callable[[str], int]
) -> ThreadRenderer:
    """What ``ThreadViews.view`` builds once and keeps: inherited history, sealed, then
    the current run."""
    rend = ThreadRenderer(count, PROFILE.message_overhead, large=LARGE)
    for rec in records[:start]:
        rend.feed(rec, inherited=True)
    rend.seal_inherited()
    for rec in records[start:]:
        rend.feed(rec, inherited=False)
    return rend


def ours_prepare(
    rend: ThreadRenderer, new: list[RecordView], count: Callable[[str], int], method: str
) -> int:
    for rec in new:
        rend.feed(rec, inherited=False)
    if rend.pending_calls():
        raise RuntimeError("tool calls still pending")
    built = assemble(
        profile=PROFILE,
        counting_method=method,
        count=count,
        instructions=INSTRUCTIONS,
        skill_bindings=SKILL_BINDINGS,
        tools=TOOLS,
        thread=rend,
    )
    enforce(built.report)
    return built.report.estimated_input


def naive_prepare(records: list[RecordView], counter: TokenCounter) -> int:
    """Rebuild every message from the records and count each with tiktoken, no cache."""
    ov = PROFILE.message_overhead
    catalog = "Available skills:\n" + "\n".join(
        f"- {b['name']} (v{b['version']}): {b['description']} — load with load_skill"
        for b in SKILL_BINDINGS
    )
    messages: list[Message] = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "system", "content": catalog},
    ]
    total = counter.count(INSTRUCTIONS) + counter.count(catalog) + 2 * ov
    total += counter.count(json.dumps(TOOLS, sort_keys=True, separators=(",", ":")))
    for r in records:
        p = r.payload
        if r.kind == "user_input":
            msg: Message = {"role": "user", "content": r.text}
            n = counter.count(r.text)
        elif r.kind == "assistant_message":
            calls = p.get("tool_calls") or []
            msg = {"role": "assistant", "content": r.text}
            if calls:
                msg["tool_calls"] = [
                    {"id": c["call_id"], "name": c["name"], "arguments": c["arguments_json"]}
                    for c in calls
                ]
            n = counter.count(token_text(r.kind, r.text, p))
        elif r.kind == "tool_outcome":
            msg = {"role": "tool", "tool_call_id": p["call_id"], "content": r.text}
            n = counter.count(token_text(r.kind, r.text, p))
            if n > LARGE.inline_max_tokens:  # the same preview view as ours
                shown = r.text[: LARGE.preview_chars]
                msg["content"] = (
                    f"[result truncated: call_id={p['call_id']} name={p['name']} "
                    f"status={p['status']}; {len(r.text)} characters, {n} tokens; showing "
                    f'characters 0-{len(shown)}. Read the rest with read_content(ref="rec:'
                    f'{r.record_id}", offset={len(shown)}, limit=8000); readable range '
                    f"0-{len(r.text)} characters.]\n{shown}"
                )
                n = counter.count(msg["content"])
        else:
            continue
        messages.append(msg)
        total += n + ov
    if total > PROFILE.input_budget():
        raise RuntimeError("over budget")
    return total


# ── the run ──────────────────────────────────────────────────────────────────────────


@dataclass
class Row:
    records: int
    records_end: int
    messages: int
    calls: int
    naive_calls: int
    ours_p50_ms: float
    ours_p99_ms: float
    naive_p50_ms: float
    naive_p99_ms: float
    ratio_p50: float
    ratio_p99: float
    ours_estimate: int
    naive_estimate: int
    estimate_diff_pct: float
    cold_build_ms: float
    ingest_count_s: float
    cache_hits: int
    cache_misses: int
    cold: prepare_cold.Cold | None = None


def bench_size(
    n: int, calls: int, naive_calls: int, seed: int, restarts: int = 0, dsn: str | None = None
) -> Row:
    raw = make_counter(ENCODING)
    t0 = time.perf_counter()
    sess, start = build_session(n, seed, raw)
    ingest_s = time.perf_counter() - t0
    cached = CachedCounter(raw)

    def count(text: str) -> int:  # PrepareService._count
        return cached.count_keyed(hashlib.sha256(text.encode()).hexdigest(), text)

    t0 = time.perf_counter()
    rend = ours_renderer(sess.records, start, count)
    cold_ms = (time.perf_counter() - t0) * 1000
    messages = len(rend.messages)
    log(
        f"{n:,} records: synthesised and counted at ingest in {ingest_s:.1f} s; "
        f"cold render (once per view, not in the loop) {cold_ms:.0f} ms"
    )
    # naive runs on evenly spread calls: it is far slower at the larger sizes
    naive_at = {round(i * calls / naive_calls) for i in range(naive_calls)}
    ours_ms: list[float] = []
    naive_ms: list[float] = []
    ours_est = naive_est = 0
    gc.collect()
    for i in range(calls):
        before = len(sess.records)
        sess.step(1)  # 2 new records, counted at ingest (the processor's work)
        new = sess.records[before:]
        t0 = time.perf_counter()
        ours_est = ours_prepare(rend, new, count, cached.method)
        ours_ms.append((time.perf_counter() - t0) * 1000)
        if i in naive_at:
            t0 = time.perf_counter()
            naive_est = naive_prepare(sess.records, raw)
            naive_ms.append((time.perf_counter() - t0) * 1000)
            if naive_est != ours_est and abs(naive_est - ours_est) > 0.01 * ours_est:
                raise AssertionError(f"estimates differ: ours {ours_est}, naive {naive_est}")
    # the last call is always one both sides ran, so the estimates compare like for like
    if calls - 1 not in naive_at:
        naive_est = naive_prepare(sess.records, raw)
    o50, o99, n50, n99 = (
        pct(ours_ms, 50),
        pct(ours_ms, 99),
        pct(naive_ms, 50),
        pct(naive_ms, 99),
    )
    row = Row(
        records=n,
        records_end=len(sess.records),
        messages=messages,
        calls=calls,
        naive_calls=len(naive_ms),
        ours_p50_ms=round(o50, 3),
        ours_p99_ms=round(o99, 3),
        naive_p50_ms=round(n50, 3),
        naive_p99_ms=round(n99, 3),
        ratio_p50=round(n50 / o50, 1),
        ratio_p99=round(n99 / o99, 1),
        ours_estimate=ours_est,
        naive_estimate=naive_est,
        estimate_diff_pct=round(100 * (naive_est - ours_est) / ours_est, 4),
        cold_build_ms=round(cold_ms, 1),
        ingest_count_s=round(ingest_s, 2),
        cache_hits=cached.hits,
        cache_misses=cached.misses,
    )
    log(
        f"  ours p50 {row.ours_p50_ms} ms p99 {row.ours_p99_ms} ms ({calls} calls); naive p50 "
        f"{row.naive_p50_ms} ms p99 {row.naive_p99_ms} ms ({row.naive_calls} calls); "
        f"estimates ours {ours_est:,} / naive {naive_est:,} tokens"
    )
    if restarts:
        row.cold = asyncio.run(
            prepare_cold.measure(
                sess.records,
                start,
                raw,
                ours_renderer,
                lambda rend, new, count: ours_prepare(rend, new, count, cached.method),
                restarts,
                dsn,
                n,
            )
        )
        c = row.cold
        log(
            f"  cold prepare over {restarts} restarts: from the stored state p50 "
            f"{c.restart_p50_ms} ms p99 {c.restart_p99_ms} ms ({c.state_bytes:,} bytes, "
            f"{'PostgreSQL' if c.via_postgres else 'memory'}, {c.lag_records} records since);"
            f" full render p50 {c.full_p50_ms} ms p99 {c.full_p99_ms} ms"
        )
    return row


def cold_table(rows: list[Row]) -> str:
    lines = [
        "",
        "| records | warm p50 ms | warm p99 ms | cold, from stored state p50 ms | cold, from"
        " stored state p99 ms | (its CPU p99 ms) | target p99 ms | cold, full render p50 ms |"
        " cold, full render p99 ms | state bytes | read from | restarts |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        c = r.cold
        if c is None:
            continue
        lines.append(
            f"| {r.records:,} | {r.ours_p50_ms} | {r.ours_p99_ms} | {c.restart_p50_ms:,} |"
            f" {c.restart_p99_ms:,} | {c.restart_cpu_p99_ms:,} | {prepare_cold.verdict(c)} |"
            f" {c.full_p50_ms:,} | {c.full_p99_ms:,} | {c.state_bytes:,} |"
            f" {'PostgreSQL' if c.via_postgres else 'memory'} | {c.restarts} |"
        )
    return "\n".join(lines)


def table(rows: list[Row]) -> str:
    lines = [
        "",
        "| records (start → end) | messages | calls ours / naive | ours p50 ms | ours p99 ms |"
        " naive p50 ms | naive p99 ms | naive/ours p50 | naive/ours p99 | estimate ours"
        " (tokens) | estimate naive (tokens) | cold render ms (once per view) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.records:,} → {r.records_end:,} | {r.messages:,} | {r.calls} / {r.naive_calls} |"
            f" {r.ours_p50_ms} | {r.ours_p99_ms} | {r.naive_p50_ms:,} | {r.naive_p99_ms:,} |"
            f" {r.ratio_p50:,}x | {r.ratio_p99:,}x | {r.ours_estimate:,} | {r.naive_estimate:,} |"
            f" {r.cold_build_ms:,} |"
        )
    return "\n".join(lines)


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="records in the thread, per size")
    ap.add_argument("--calls", default=DEFAULT_CALLS, help="prepares timed (ours), per size")
    ap.add_argument(
        "--naive-calls", default=DEFAULT_NAIVE_CALLS, help="prepares timed (naive), per size"
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--restarts", type=int, default=5, help="cold prepares timed per size (0: none)"
    )
    ap.add_argument(
        "--pg-dsn",
        default=Settings().pg_dsn,
        help="read the stored render state from PostgreSQL ('none': from memory)",
    )
    args = ap.parse_args()
    dsn = None if args.pg_dsn == "none" else args.pg_dsn
    sizes, calls, naive_calls = _ints(args.sizes), _ints(args.calls), _ints(args.naive_calls)
    if not len(sizes) == len(calls) == len(naive_calls):
        ap.error("--sizes, --calls and --naive-calls need one value per size")
    load = os.getloadavg()
    machine = {
        "cores": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in load],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    method = (
        "Measured in one process, same state for both: wall time of one prepare after "
        "appending 2 records (assistant tool call + outcome) to a thread of N records; "
        "ours = cached ThreadRenderer fed the 2 new records + assemble() + enforce() "
        "(hash-keyed CachedCounter), naive = rebuild all messages + tiktoken "
        f"{ENCODING} recount of every message, instructions, skill catalog and tool "
        f"schemas + budget compare. K (ours) = {calls}, naive on {naive_calls} evenly "
        "spread calls of those K; ingest counting and the one-off cold render excluded. "
        f"Machine: {machine['cores']} cores, shared with other work, load average "
        f"{load[0]:.2f} at start, Python {machine['python']}."
    )
    log(method)
    rows = [
        bench_size(n, k, min(k, nk), args.seed + i, args.restarts, dsn)
        for i, (n, k, nk) in enumerate(zip(sizes, calls, naive_calls, strict=True))
    ]
    results: dict[str, Any] = {
        "machine": machine,
        "methodology": method,
        "profile": {
            "context_capacity": PROFILE.context_capacity,
            "input_budget": PROFILE.input_budget(),
            "counting": ENCODING,
            "inline_max_tokens": LARGE.inline_max_tokens,
        },
        "sizes": [{**vars(r), "cold": None if r.cold is None else vars(r.cold)} for r in rows],
    }
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / "prepare_scale.json"
    out.write_text(json.dumps(results, indent=2))
    print(table(rows))
    print(cold_table(rows))
    print(f"\n[bench-prepare-scale] {method}")
    print(f"[bench-prepare-scale] wrote {out}")


if __name__ == "__main__":
    main()
