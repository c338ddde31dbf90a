"""``python -m benchmarks.compaction``: what compaction costs besides the model, and how
often a steady load near the soft threshold calls the summarizer.

1. **Overhead excluding model time, 100k-token history** (target ≤ 50 ms). A thread of
   ~100,000 tiktoken tokens (400 question runs: question, a model step calling a tool,
   its ~220-token result, the answer) is written straight into a fresh database; a
   ``CompactionWorker`` runs in this process and handles fresh jobs for it. The gateway
   is timed around every ``summarize`` call and a producer that publishes nothing stands
   in for Kafka, so ``handle`` time minus time inside ``summarize`` is the service's own
   work: reading the thread, selection, segmenting, validation, merging, counting the
   summary and saving the candidate (Kafka publish time excluded).
2. **Summarizer calls per 1,000 events at a steady 82% load**. The real services
   (Prepare, session processor, compaction service) run against a scripted
   OpenAI-compatible model server whose summaries never reduce anything; sessions sit
   between 80% and 99% of a small InputBudget while small rounds are appended, each
   followed by a prepare (one trigger check each).

Prints a table and writes ``build/bench/compaction.json``. Uses its own database
(``alc_bench_cmp_<tag>``, dropped at the end unless ``--keep-db``), topics and consumer
groups, against the stack ``deploy/stack.sh up`` started (or ``ALC_*`` settings).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import asyncpg

from devstack.launcher import COMPACTION_READY, PROCESSOR_READY, Proc
from domain.auth import KeyKind
from domain.compaction.drafts import Fact, SummaryDraft, SummaryRequest, SummaryResult
from domain.compaction.gateway import SummaryGateway
from domain.context.rendering import RecordView
from domain.context.tokens import CachedCounter
from domain.policy.context_policy import ContextPolicy
from domain.record_rows import RECORD_COLUMNS
from schemas.settings import Settings
from schemas.wire import CompactionRequest
from services.compaction.extractive import ExtractiveSummarizer
from services.compaction.job_records import JobRecords
from services.compaction.worker import CompactionWorker, WorkerConfig
from services.sdk.client import ContextClient, RunHandle
from storage.api_keys import issue
from storage.compaction.jobs import PgCompactionJobs
from storage.migrate import apply_dsn
from storage.pool import create_pool
from storage.tokenizers import TiktokenCounter
from streams.kafka.bus_secrets import issuer_secret
from streams.kafka.provision import ensure_bus
from streams.kafka.publish import Publisher

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "bench"
TOKEN_METHOD = "tiktoken:cl100k_base"
TOOL_CATALOG = [
    {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def log(msg: str) -> None:
    print(f"[bench-compaction] {msg}", flush=True)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


# ── 1. overhead without the model ────────────────────────────────────────────────────


class TimedGateway:
    """Wraps a gateway and adds up the wall time spent inside ``summarize``."""

    def __init__(self, inner: SummaryGateway) -> None:
        self.inner = inner
        self.name = inner.name
        self.seconds = 0.0
        self.calls = 0

    async def summarize(self, req: SummaryRequest) -> SummaryResult:
        t0 = time.perf_counter()
        try:
            return await self.inner.summarize(req)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


class StubGateway:
    """A model that costs nothing: a fixed small valid draft citing the segment's first id."""

    name = "stub"

    async def summarize(self, req: SummaryRequest) -> SummaryResult:
        first = req.segment[0].record_id
        fact = Fact("earlier work on the listed files, answered", (first,))
        return SummaryResult(
            draft=SummaryDraft((fact,), (), (), (), (), ()),
            model_operation_id=req.model_operation_id,
            input_tokens=0,
            output_tokens=0,
            elapsed_ms=0.0,
            adapter=self.name,
        )


class NullProducer:
    """Stands in for the Kafka publisher: publishing costs nothing here."""

    async def send_and_wait(self, topic: str, key: bytes | None, value: bytes) -> None:
        return None


class TimedViews:
    """The worker's thread reads (``JobRecords``), timed."""

    def __init__(self, views: JobRecords) -> None:
        self.views, self.seconds = views, 0.0

    async def view(self, req: CompactionRequest, covered: frozenset[str]) -> list[RecordView]:
        t0 = time.perf_counter()
        try:
            return await self.views.view(req, covered)
        finally:
            self.seconds += time.perf_counter() - t0


class TimedWorker(CompactionWorker):
    """The real worker; only the database read of the thread is timed as well."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timed = TimedViews(self.views)
        self.views = self.timed  # type: ignore[assignment]

    @property
    def read_seconds(self) -> float:
        return self.timed.seconds


@dataclass(frozen=True)
class History:
    session_id: str
    run_id: str
    instance_id: str
    last_sequence: int
    records: int
    tokens: int
    policy_revision: str
    user_turns: int


def _tool_result(counter: TiktokenCounter, r: int, target: int) -> str:
    """A grep-like tool result of exactly ``target`` tokens (realistic paths and code)."""
    lines = []
    i = 0
    while True:
        mod, fn = (r * 7 + i) % 41, (r * 13 + i * 3) % 97
        lines.append(
            f"src/pkg_{mod}/handlers/item_{fn}.py:{12 + (r + i * 17) % 480}:"
            f"    return self.store.fetch(key=f'k{r}-{i}', limit={(r + i) % 50 + 1})"
        )
        text = "\n".join(lines)
        if counter.count(text) >= target:
            break
        i += 1
    while counter.count(text) > target:
        text = text[:-1]
    return text


async def seed_history(
    pool: asyncpg.Pool, counter: TiktokenCounter, rounds: int, tool_tokens: int
) -> History:
    """One session of ``rounds`` question runs, written like the processor writes them."""
    tag = uuid.uuid4().hex[:8]
    policy = ContextPolicy().to_dict()
    release_id, session_id = f"rel_bench{tag}", f"ses_bench{tag}"
    policy_revision = f"pol_bench{tag}"
    rows: list[tuple[Any, ...]] = []
    runs: list[tuple[str, str, int, int, int, int]] = []  # run, instance, through, started..
    seq = 0
    turns = steps = 0
    tokens = 0
    now_ms = int(time.time() * 1000)

    def add(
        run_id: str,
        inst: str,
        iseq: int,
        kind: str,
        authority: str,
        text: str,
        payload: dict[str, Any],
        event_key: str,
        operation_id: str | None = None,
        producer: str = "runtime",
    ) -> None:
        nonlocal seq, tokens
        seq += 1
        n = counter.count(text) if text else 0
        tokens += n
        raw = text.encode()
        rows.append(
            (
                session_id,
                seq,
                f"rec_{uuid.uuid4().hex}",
                event_key,
                "bench-space",
                "bench-actor",
                run_id,
                inst,
                iseq,
                kind,
                authority,
                "session",
                operation_id,
                text,
                None,
                hashlib.sha256(raw).hexdigest(),
                len(raw),
                "text/plain",
                payload,
                n,
                TOKEN_METHOD,
                producer,
                now_ms + seq,
                0,
                seq,
                None,
            )
        )

    for r in range(rounds):
        run_id = f"run_{tag}{r:04d}"
        inst = f"{run_id}.main"
        runs.append((run_id, inst, seq, seq + 1, turns, steps))
        last = r == rounds - 1
        call_id = f"call_{tag}_{r}"
        ok = r % 9 != 4  # now and then a tool fails
        add(
            run_id,
            inst,
            1,
            "run_started",
            "host",
            "",
            {"type": "RunLifecyclePayload", "reason": None, "release_id": release_id},
            f"run_started:{run_id}",
            producer="prepare",
        )
        add(
            run_id,
            inst,
            2,
            "user_input",
            "user",
            f"Question {r}: where does pkg_{r % 41} fetch item {r % 97}, and with which limit?",
            {"type": "UserInputPayload", "intent": "question"},
            f"q{r}",
        )
        add(
            run_id,
            inst,
            3,
            "assistant_message",
            "model",
            f"Let me search pkg_{r % 41} for the fetch call.",
            {
                "type": "AssistantMessagePayload",
                "purpose": "action",
                "tool_calls": [
                    {
                        "name": "read_file",
                        "call_id": call_id,
                        "arguments_json": json.dumps({"path": f"src/pkg_{r % 41}"}),
                    }
                ],
                "finish_reason": "tool_calls",
                "model_operation_id": f"op{r}a",
                "usage_input_tokens": None,
                "usage_output_tokens": None,
            },
            f"model:op{r}a",
            f"op{r}a",
        )
        add(
            run_id,
            inst,
            4,
            "tool_outcome",
            "tool",
            _tool_result(counter, r, tool_tokens)
            if ok
            else f"permission denied: src/pkg_{r % 41} (errno 13)",
            {
                "type": "ToolOutcomePayload",
                "name": "read_file",
                "call_id": call_id,
                "status": "ok" if ok else "error",
                "error_code": None if ok else "EACCES",
                "tool_kind": "function",
                "server": None,
                "skill": None,
                "view_ref": None,
            },
            f"tool:{call_id}",
            f"tool:{call_id}",
        )
        add(
            run_id,
            inst,
            5,
            "assistant_message",
            "model",
            (
                f"pkg_{r % 41} fetches item {r % 97} through self.store.fetch with limit"
                f" {r % 50 + 1}; I will keep that call as it is."
                if ok
                else f"I could not read src/pkg_{r % 41}: permission denied."
            ),
            {
                "type": "AssistantMessagePayload",
                "purpose": "action",
                "tool_calls": [],
                "finish_reason": "stop",
                "model_operation_id": f"op{r}b",
                "usage_input_tokens": None,
                "usage_output_tokens": None,
            },
            f"model:op{r}b",
            f"op{r}b",
        )
        turns += 1
        steps += 2
        if not last:
            add(
                run_id,
                inst,
                6,
                "run_finished",
                "host",
                "",
                {"type": "RunLifecyclePayload", "reason": None, "release_id": None},
                f"run_finished:{run_id}",
            )
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO releases (release_id, agent_id, instructions, tool_catalog,"
            " skill_bindings, model_profile, context_policy, policy_revision)"
            " VALUES ($1,$2,$3,$4,$5,$6,$7,$8)",
            release_id,
            "bench",
            "You are a careful coding agent.",
            TOOL_CATALOG,
            [],
            {
                "name": "bench-128k",
                "context_capacity": 128_000,
                "output_reserve": 0,
                "safety_margin": 0,
            },
            policy,
            policy_revision,
        )
        await conn.execute(
            "INSERT INTO sessions (session_id, space_id, actor_id, release_id,"
            " next_session_sequence, active_run_id, revision, user_turns, model_steps)"
            " VALUES ($1,'bench-space','bench-actor',$2,$3,$4,$5,$6,$7)",
            session_id,
            release_id,
            seq + 1,
            runs[-1][0],
            seq,
            turns,
            steps,
        )
        for i, (run_id, inst, through, started, t, s) in enumerate(runs):
            snap = await conn.fetchval(
                "INSERT INTO history_snapshots (session_id, run_id, through_session_sequence,"
                " policy_revision, user_turns, model_steps) VALUES ($1,$2,$3,$4,$5,$6)"
                " RETURNING snapshot_id",
                session_id,
                run_id,
                through,
                policy_revision,
                t,
                s,
            )
            last = i == len(runs) - 1
            await conn.execute(
                "INSERT INTO runs (session_id, run_id, main_instance_id, status, snapshot_id,"
                " started_sequence, ended_at) VALUES ($1,$2,$3,$4,$5,$6,"
                " CASE WHEN $4='active' THEN NULL ELSE now() END)",
                session_id,
                run_id,
                inst,
                "active" if last else "finished",
                snap,
                started,
            )
            await conn.execute(
                "INSERT INTO threads (session_id, run_id, instance_id, next_instance_sequence,"
                " revision) VALUES ($1,$2,$3,$4,$5)",
                session_id,
                run_id,
                inst,
                6 if last else 7,
                5 if last else 6,
            )
        await conn.copy_records_to_table("records", records=rows, columns=RECORD_COLUMNS)
    return History(
        session_id,
        runs[-1][0],
        runs[-1][1],
        seq,
        len(rows),
        tokens,
        policy_revision,
        turns,
    )


async def overhead_variant(
    pool: asyncpg.Pool,
    counter: CachedCounter,
    hist: History,
    gateway: SummaryGateway,
    max_calls: int,
    jobs: int,
    warmup: int,
    cold: bool = False,
) -> dict[str, Any]:
    """``cold``: a new worker per job, so every job reads the whole thread from the
    database (the first job on a thread, or after a restart); otherwise the worker's
    per-thread view cache serves repeated jobs and only new records are read."""
    timed = TimedGateway(gateway)

    def new_worker() -> TimedWorker:
        return TimedWorker(
            PgCompactionJobs(pool),
            cast(Publisher, NullProducer()),
            timed,
            counter,
            WorkerConfig("bench.unused", segment_tokens=6000, output_tokens=800, call_timeout_s=90),
        )

    worker = new_worker()
    totals: list[float] = []
    overheads: list[float] = []
    in_model: list[float] = []
    reads: list[float] = []
    outcome = None
    for i in range(warmup + jobs):
        req = CompactionRequest(
            job_id=f"cmp_bench{uuid.uuid4().hex[:12]}",
            session_id=hist.session_id,
            run_id=hist.run_id,
            instance_id=hist.instance_id,
            view_watermark=hist.last_sequence,
            parent_summary_id=None,
            policy_revision=hist.policy_revision,
            task_version=hist.user_turns,
            trigger_reasons=("context_ratio",),
            budget_before=hist.tokens,
            input_budget=128_000,
            target_tokens=76_800,
            max_calls=max_calls,
            requested_at_ms=int(time.time() * 1000),
        )
        if cold:
            worker = new_worker()
        timed.seconds, timed.calls, worker.timed.seconds = 0.0, 0, 0.0
        t0 = time.perf_counter()
        outcome = await worker.handle(req)
        total = time.perf_counter() - t0
        if outcome.status != "succeeded":
            raise RuntimeError(f"compaction job did not succeed: {outcome}")
        if i < warmup:
            continue
        totals.append(total * 1000)
        in_model.append(timed.seconds * 1000)
        overheads.append((total - timed.seconds) * 1000)
        reads.append(worker.read_seconds * 1000)
    assert outcome is not None
    return {
        "gateway": gateway.name + (" (cold)" if cold else ""),
        "cache": "cold" if cold else "warm",
        "max_calls": max_calls,
        "jobs": jobs,
        "model_calls_per_job": outcome.model_calls,
        "covered_records": len(outcome.covered_record_ids),
        "covered_tokens": outcome.covered_tokens,
        "summary_tokens": outcome.summary_tokens,
        "overhead_p50_ms": round(pct(overheads, 50), 2),
        "overhead_p99_ms": round(pct(overheads, 99), 2),
        "db_read_p50_ms": round(pct(reads, 50), 2),
        "summarize_p50_ms": round(pct(in_model, 50), 2),
        "summarize_p99_ms": round(pct(in_model, 99), 2),
        "total_p50_ms": round(pct(totals, 50), 2),
        "total_p99_ms": round(pct(totals, 99), 2),
    }


async def bench_overhead(
    dsn: str, rounds: int, tool_tokens: int, jobs: int, warmup: int
) -> dict[str, Any]:
    pool = await create_pool(dsn, 1, 2)
    tik = TiktokenCounter()
    try:
        t0 = time.perf_counter()
        hist = await seed_history(pool, tik, rounds, tool_tokens)
        log(
            f"overhead: seeded {hist.records:,} records / {hist.tokens:,} tokens"
            f" ({rounds} question runs) in {time.perf_counter() - t0:.1f} s"
        )
        counter = CachedCounter(tik)
        variants = []
        for gateway, max_calls, cold in (
            (StubGateway(), 4, False),
            (ExtractiveSummarizer(), 4, False),
            (StubGateway(), 20, False),
            (ExtractiveSummarizer(), 20, False),
            (StubGateway(), 4, True),
            (StubGateway(), 20, True),
        ):
            v = await overhead_variant(
                pool,
                counter,
                hist,
                cast(SummaryGateway, gateway),
                max_calls,
                jobs,
                warmup,
                cold,
            )
            log(
                f"  {v['gateway']:<10} max_calls={max_calls:<2}: {v['model_calls_per_job']} calls,"
                f" covers {v['covered_records']:,} records / {v['covered_tokens']:,} tokens;"
                f" overhead p50 {v['overhead_p50_ms']} ms p99 {v['overhead_p99_ms']} ms"
                f" (db read p50 {v['db_read_p50_ms']} ms); summarize p50"
                f" {v['summarize_p50_ms']} ms"
            )
            variants.append(v)
        return {
            "history": {
                "records": hist.records,
                "tokens": hist.tokens,
                "question_runs": rounds,
                "tool_result_tokens": tool_tokens,
            },
            "settings": {"segment_tokens": 6000, "output_tokens": 800},
            "jobs_per_variant": jobs,
            "warmup_jobs": warmup,
            "excluded": "model time (time inside summarize) and Kafka publish (null producer)",
            "target_overhead_ms": 50,
            "variants": variants,
        }
    finally:
        await pool.close()


# ── 2. steady 82% load through the real services ─────────────────────────────────────


class _Tokens:
    def __init__(self) -> None:
        self.c = TiktokenCounter()

    def padded(self, text: str, tokens: int) -> str:
        """``text`` padded to exactly ``tokens`` cl100k tokens."""
        out = text + " x" * max(0, tokens - self.c.count(text))
        while self.c.count(out) > tokens:
            out = out[:-2]
        return out


async def _round(c: ContextClient, run: RunHandle, tag: str, result_tokens: int) -> None:
    """One model step with a tool call and its result, then a final answer (3 events)."""
    await c.append_model_result(
        run, f"Looking at {tag}.", f"{tag}-m1", [(f"{tag}-c", "read_file", json.dumps({"p": tag}))]
    )
    body = " ".join(f"row{i}={i * 7}" for i in range(result_tokens // 3))
    await c.append_tool_outcome(run, f"{tag}-c", "read_file", body)
    await c.append_model_result(run, f"{tag} read.", f"{tag}-m2")


async def _settle(pool: asyncpg.Pool, sessions: list[str], checks: int, timeout: float) -> None:
    """Until every check has its report and no job is still running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reports = await pool.fetchval(
            "SELECT count(*) FROM trigger_reports WHERE session_id = ANY($1::text[])", sessions
        )
        running = await pool.fetchval(
            "SELECT count(*) FROM compaction_jobs WHERE session_id = ANY($1::text[])"
            " AND status='requested'",
            sessions,
        )
        if reports >= checks and running == 0:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("trigger reports / compaction jobs did not settle in time")


async def bench_steady(
    s: Settings,
    url: str,
    hits: Callable[[], int],
    target_events: int,
    budget: int,
    start_ratio: float,
) -> dict[str, Any]:
    tok = _Tokens()
    pool = await create_pool(s.pg_dsn, 1, 2)
    result: dict[str, Any] = {}
    try:
        async with ContextClient(s.kafka_bootstrap, url, topic=s.topic_records) as c:
            rel = await c.register_release(
                agent_id="bench-cmp",
                instructions="You are a careful benchmark agent.",
                tool_catalog=TOOL_CATALOG,
                model_profile={
                    "name": f"m{budget}",
                    "context_capacity": budget,
                    "output_reserve": 0,
                    "safety_margin": 0,
                },
                context_policy={"recent_complete_groups": 1},
            )

            async def session_start(task_tokens: int, n: int) -> tuple[RunHandle, float]:
                sess = await c.open_session("bench", f"actor-{n}", rel["release_id"])
                run = await c.start_run(sess)
                await c.append_user(run, tok.padded("The task.", task_tokens), f"task{n}")
                await _round(c, run, f"s{n}w0", 280)
                return run, float((await c.prepare(run))["budget"]["ratio"])

            # Calibrate the padded task so a session starts at ``start_ratio`` (this
            # probe session is not counted).
            task = round(budget * 0.74)
            probe, r0 = await session_start(task, 0)
            await c.finish_run(probe)
            # Its first check may start a job: let it finish before counting model calls.
            await _settle(pool, [probe.session_id], 1, timeout=60)
            task += round((start_ratio - r0) * budget)
            log(
                f"steady: budget {budget} tokens; probe at {r0:.3f} → task padded to {task}"
                f" tokens to start at ~{start_ratio:.2f}"
            )
            hits0 = hits()
            sessions: list[str] = []
            ratios: list[float] = []
            checks = 0
            appended = 0
            t0 = time.perf_counter()
            n = 0
            while appended < target_events:
                n += 1
                run, ratio = await session_start(task, n)
                sessions.append(run.session_id)
                appended += 4  # the task question and the first round
                checks += 1
                ratios.append(ratio)
                step = 0.0
                i = 0
                while appended < target_events and ratio + 1.5 * step <= 0.99:
                    i += 1
                    await _round(c, run, f"s{n}w{i}", 20)
                    appended += 3
                    new = float((await c.prepare(run))["budget"]["ratio"])
                    checks += 1
                    ratios.append(new)
                    step = max(step, new - ratio)
                    ratio = new
                await c.finish_run(run)
                appended += 1
                if n % 5 == 0:
                    log(
                        f"  {n} sessions, {appended} events appended, {checks} checks,"
                        f" {hits() - hits0} model calls so far"
                    )
            elapsed = time.perf_counter() - t0
        await _settle(pool, sessions, checks, timeout=60)
        model_calls = hits() - hits0
        events = await pool.fetchval(
            "SELECT count(*) FROM records WHERE session_id = ANY($1::text[])", sessions
        )
        rows = await pool.fetch(
            "SELECT session_id, decision, reason, fired FROM trigger_reports"
            " WHERE session_id = ANY($1::text[]) ORDER BY report_id",
            sessions,
        )
        jobs = await pool.fetch(
            "SELECT status, stage, reason FROM compaction_jobs WHERE session_id = ANY($1::text[])",
            sessions,
        )
        decisions = Counter(r["decision"] for r in rows)
        reasons = Counter(f"{r['decision']}:{r['reason']}" for r in rows)
        over = sum(1 for r in rows if "context_ratio" in r["fired"])
        first: dict[str, str] = {}
        for r in rows:
            first.setdefault(r["session_id"], r["decision"])
        job_outcomes = Counter(f"{j['status']}:{j['stage']}:{j['reason']}" for j in jobs)
        result = {
            "input_budget": budget,
            "sessions": len(sessions),
            "events_appended_by_sdk": appended,
            "events_committed": events,
            "seconds": round(elapsed, 1),
            "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3),
            "ratio_median": round(pct(ratios, 50), 3),
            "checks": len(rows),
            "checks_over_threshold": over,
            "decisions": dict(decisions),
            "reasons": dict(reasons),
            "jobs_started": decisions.get("job_started", 0),
            "jobs_at_first_check_of_session": sum(d == "job_started" for d in first.values()),
            "job_outcomes": dict(job_outcomes),
            "suppressed_by_growth_gate": reasons.get("suppressed:below_retry_growth_gate", 0),
            "suppressed_job_in_flight": reasons.get("suppressed:job_in_flight", 0),
            "model_calls": model_calls,
            "model_calls_per_1000_events": round(model_calls * 1000 / events, 1),
            "naive_calls": over,
            "naive_calls_per_1000_events": round(over * 1000 / events, 1),
        }
        log(
            f"steady: {events} events in {len(sessions)} sessions ({elapsed:.1f} s), ratio"
            f" {result['ratio_min']} to {result['ratio_max']}; {len(rows)} checks, {over} over"
            f" threshold; {result['jobs_started']} jobs; {model_calls} model calls"
        )
    finally:
        await pool.close()
    return result


# ── output ────────────────────────────────────────────────────────────────────────────


def table(r: dict[str, Any]) -> str:
    o = r["overhead"]
    h = o["history"]
    lines = [
        "",
        f"Compaction overhead excluding model time — history {h['records']:,} records /"
        f" {h['tokens']:,} tokens; segment 6000, output 800; {o['jobs_per_variant']} jobs per"
        " row; model time and Kafka publish (null producer) excluded; target ≤ 50 ms",
        "",
        "| summarizer | max_calls | calls/job | covered records | covered tokens |"
        " overhead p50 ms | overhead p99 ms | of which db read p50 ms |"
        " summarize p50 ms | total p50 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for v in o["variants"]:
        lines.append(
            f"| {v['gateway']} | {v['max_calls']} | {v['model_calls_per_job']} |"
            f" {v['covered_records']:,} | {v['covered_tokens']:,} | {v['overhead_p50_ms']} |"
            f" {v['overhead_p99_ms']} | {v['db_read_p50_ms']} | {v['summarize_p50_ms']} |"
            f" {v['total_p50_ms']} |"
        )
    s = r["steady"]
    lines += [
        "",
        f"Steady load at ~82% of InputBudget {s['input_budget']:,} (ratio {s['ratio_min']} to "
        f"{s['ratio_max']}, median {s['ratio_median']}); scripted model, summaries never"
        " reduce",
        "",
        "| measure | value | per 1,000 events |",
        "|---|---:|---:|",
        f"| events (records committed, {s['sessions']} sessions) | {s['events_committed']:,} | |",
        f"| checks (trigger reports) | {s['checks']:,} | |",
        f"| checks over the 80% threshold | {s['checks_over_threshold']:,} | |",
        f"| compaction jobs started | {s['jobs_started']:,} | |",
        f"| (of which at a session's first check) | {s['jobs_at_first_check_of_session']:,} | |",
        f"| suppressed by the growth gate | {s['suppressed_by_growth_gate']:,} | |",
        f"| suppressed, job in flight | {s['suppressed_job_in_flight']:,} | |",
        f"| **summarizer calls** | {s['model_calls']:,} | {s['model_calls_per_1000_events']} |",
        f"| naive 'compact at every check over 80%' | {s['naive_calls']:,} |"
        f" {s['naive_calls_per_1000_events']} |",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=400, help="question runs in the history")
    ap.add_argument("--tool-tokens", type=int, default=220)
    ap.add_argument("--jobs", type=int, default=20, help="measured jobs per variant")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--events", type=int, default=1000, help="steady load: events to append")
    ap.add_argument("--budget", type=int, default=4000, help="steady load: InputBudget")
    ap.add_argument("--start-ratio", type=float, default=0.82)
    ap.add_argument("--keep-db", action="store_true", help="keep alc_bench_cmp_<tag>")
    args = ap.parse_args()
    base = Settings()
    tag = uuid.uuid4().hex[:6]
    db = f"alc_bench_cmp_{tag}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(base.pg_dsn)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    started = time.perf_counter()
    asyncio.run(admin(f'CREATE DATABASE "{db}"'))
    env_over = {
        "ALC_PG_DSN": base.pg_dsn.rsplit("/", 1)[0] + "/" + db,
        "ALC_TOPIC_RECORDS": f"benchcmp{tag}.records",
        "ALC_TOPIC_COMMITTED": f"benchcmp{tag}.committed",
        "ALC_TOPIC_DEAD_LETTER": f"benchcmp{tag}.deadletter",
        "ALC_TOPIC_COMPACTION_REQUESTS": f"benchcmp{tag}.compaction.requests",
        "ALC_COMPACTION_GROUP": f"alc-benchcmp-compaction-{tag}",
        "ALC_PROCESSOR_ID": f"alc-benchcmp-{tag}",
        "ALC_PROCESSOR_INSTANCE_ID": f"benchcmp-{tag}",
        "ALC_PREPARE_PORT": str(base.prepare_port + 11),
        "ALC_LOG_LEVEL": "WARNING",
    }
    os.environ.update(env_over)
    s = Settings()
    log(
        f"database {db}, topics benchcmp{tag}.*, prepare port {s.prepare_port};"
        f" {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} (shared machine:"
        " other processes skew the latency numbers)"
    )
    procs: list[Proc] = []
    try:
        asyncio.run(apply_dsn(s.pg_dsn))
        # The runtime's credential (R15.4): a host key of the "bench" space, read by the SDK.
        os.environ["ALC_API_KEY"] = asyncio.run(
            issue(s.pg_dsn, "bench", KeyKind.HOST, issuer=issuer_secret(s))
        ).key
        results: dict[str, Any] = {
            "machine": {"cores": os.cpu_count(), "loadavg_1m_at_start": os.getloadavg()[0]},
            "database": db,
        }
        log("1/2 compaction overhead excluding model time (in-process worker)")
        results["overhead"] = asyncio.run(
            bench_overhead(s.pg_dsn, args.rounds, args.tool_tokens, args.jobs, args.warmup)
        )
        log("2/2 summarizer calls under a steady ~82% load (real services)")
        asyncio.run(ensure_bus(s))
        from devstack.model_server import model_server  # the scripted model server (devstack)

        with model_server() as (model_url, script):
            script.mode = "long"  # valid summaries that reduce nothing
            env = {
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                "ALC_SUMMARIZER": "openai",
                "ALC_SUMMARIZER_BASE_URL": model_url,
                "ALC_SUMMARIZER_MODEL": "scripted",
                "ALC_SUMMARIZER_TIMEOUT_S": "5",
            }
            logs = OUT / f"logs-cmp-{tag}"
            procs = [
                Proc(
                    "prepare",
                    [sys.executable, "-m", "services.prepare"],
                    env,
                    logs,
                    health_url=f"http://127.0.0.1:{s.prepare_port}/healthz",
                    cwd=REPO,
                ),
                Proc(
                    "processor",
                    [sys.executable, "-m", "streams"],
                    {**env, "ALC_LOG_LEVEL": "INFO"},
                    logs,
                    ready_line=PROCESSOR_READY,
                    cwd=REPO,
                ),
                Proc(
                    "compaction",
                    [sys.executable, "-m", "services.compaction"],
                    {**env, "ALC_LOG_LEVEL": "INFO"},
                    logs,
                    ready_line=COMPACTION_READY,
                    cwd=REPO,
                ),
            ]
            for p in procs:
                p.start()
            log(f"services up (logs in {logs})")
            results["steady"] = asyncio.run(
                bench_steady(
                    s,
                    f"http://127.0.0.1:{s.prepare_port}",
                    lambda: script.hits,
                    args.events,
                    args.budget,
                    args.start_ratio,
                )
            )
    finally:
        for p in reversed(procs):
            p.stop()
        if not args.keep_db:
            asyncio.run(admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "compaction.json").write_text(json.dumps(results, indent=2))
    print(table(results))
    print(f"\n[bench-compaction] wrote {OUT / 'compaction.json'}")
    print(f"[bench-compaction] total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
