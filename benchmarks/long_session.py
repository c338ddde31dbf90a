"""``python -m benchmarks.long_session``: one long session through the real services.

One session, ``--questions`` questions (default 1,000) in a row, each a new run with 1-3
tool calls whose results are 0.5-3 KB, a small model profile (16k capacity) and frequent
compaction (every 3 questions, or at 80% of InputBudget). After every tool result the
runtime prepares an action call, as an agent loop would. Measured:

- the summary's size after each commit: max, last vs the median of the first ten, and
  how often it exceeded its bound (``compaction.summary_max_ratio``, issue 9);
- the prepared estimate vs InputBudget at every call (max ratio) and prepares refused;
- whether the current question is present verbatim in every prepared context (misses);
- summarizer calls per 1,000 committed events, compaction jobs by outcome.

Targets (issue 9): no refusal, max prepared ratio <= 1.0, the summary within its bound
throughout, 0 misses. Prints a table and writes ``build/bench/long_session.json``. Uses
its own database (``alc_bench_long_<tag>``, dropped unless ``--keep-db``), topics and
consumer groups, against the stack ``deploy/stack.sh up`` started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg

from devstack.launcher import service_set
from domain.auth import KeyKind
from schemas.settings import Settings
from services.sdk.client import ApiError, ContextClient, RunHandle
from storage.api_keys import issue
from storage.migrate import apply_dsn
from streams.kafka.bus_secrets import issuer_secret
from streams.kafka.provision import ensure_bus

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "bench"
PROFILE = {
    "name": "small-16k",
    "context_capacity": 16_384,
    "output_reserve": 2_048,
    "safety_margin": 512,
}
POLICY = {
    "recent_complete_groups": 1,
    "compaction": {"user_turns": 3, "context_ratio": 0.8, "summary_max_ratio": 0.15},
}
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {
        "name": "search",
        "description": "Search the code base",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
]
WORDS = [
    "invoice",
    "ledger",
    "parser",
    "schema",
    "export",
    "column",
    "total",
    "amount",
    "currency",
    "customer",
    "region",
    "batch",
    "retry",
    "timeout",
    "index",
    "cache",
    "shard",
    "replica",
    "offset",
    "commit",
    "rollback",
    "migration",
]


def log(msg: str) -> None:
    print(f"[bench-long] {msg}", flush=True)


def result_text(rng: random.Random, n: int, size: int) -> str:
    parts: list[str] = []
    length = 0
    while length < size:
        w = f"{rng.choice(WORDS)}_{rng.randrange(1000)}={rng.randrange(10**6)}"
        parts.append(w)
        length += len(w) + 1
    return f"result {n}: " + " ".join(parts)


async def question(
    c: ContextClient, session: dict[str, Any], rng: random.Random, q: int, m: dict[str, Any]
) -> None:
    run = await c.start_run(session)
    text = (
        f"Q{q}: in module m{q % 37}, why does {rng.choice(WORDS)} disagree with"
        f" {rng.choice(WORDS)} for customer {rng.randrange(10**5)}?"
    )
    await c.append_user(run, text, f"q{q}")
    await prepare(c, run, text, m)
    for k in range(rng.randint(1, 3)):
        call = f"q{q}c{k}"
        tool = str(rng.choice(TOOLS)["name"])
        args = json.dumps(
            {"path": f"src/m{q % 37}/f{k}.py"} if tool == "read_file" else {"q": call}
        )
        await c.append_model_result(run, f"Checking {call}.", f"{call}-m", [(call, tool, args)])
        await c.append_tool_outcome(run, call, tool, result_text(rng, k, rng.randint(500, 3000)))
        await prepare(c, run, text, m)
    await c.append_model_result(run, f"Answer to Q{q}: they disagree by rounding.", f"q{q}-a")
    await c.finish_run(run)


async def prepare(c: ContextClient, run: RunHandle, q: str, m: dict[str, Any]) -> None:
    m["prepares"] += 1
    try:
        p = await c.prepare(run)
    except ApiError as exc:
        m["refused"] += 1
        m["refusals"][exc.code] = m["refusals"].get(exc.code, 0) + 1
        return
    b = p["budget"]
    m["ratios"].append(b["estimated_input"] / b["input_budget"])
    if not any(msg.get("content") == q for msg in p["messages"]):
        m["misses"] += 1


async def measure(s: Settings, url: str, questions: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    m: dict[str, Any] = {
        "prepares": 0,
        "refused": 0,
        "refusals": {},
        "ratios": [],
        "misses": 0,
        "question_s": [],  # wall time of each question: does a long session slow down?
    }
    t0 = time.perf_counter()
    async with ContextClient(s.kafka_bootstrap, url, topic=s.topic_records) as c:
        rel = await c.register_release(
            agent_id="bench-long",
            instructions="You are a careful analyst. Answer each question from the tools.",
            tool_catalog=TOOLS,
            model_profile=PROFILE,
            context_policy=POLICY,
        )
        session = await c.open_session("bench", "analyst", rel["release_id"])
        for q in range(questions):
            tq = time.perf_counter()
            await question(c, session, rng, q, m)
            m["question_s"].append(time.perf_counter() - tq)
            if (q + 1) % 50 == 0:
                log(
                    f"  {q + 1}/{questions} questions, {m['prepares']} prepares,"
                    f" max ratio {max(m['ratios'], default=0):.3f}, refused {m['refused']},"
                    f" misses {m['misses']} ({time.perf_counter() - t0:.0f} s)"
                )
    elapsed = time.perf_counter() - t0
    pool = await asyncpg.create_pool(s.pg_dsn, min_size=1, max_size=2)
    try:
        sid = session["session_id"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and await pool.fetchval(
            "SELECT count(*) FROM compaction_jobs WHERE session_id=$1 AND status='requested'", sid
        ):
            await asyncio.sleep(0.2)
        revs = await pool.fetch(
            "SELECT summary_tokens, bound_tokens, rollup IS NOT NULL AS rolled"
            " FROM summary_revisions WHERE session_id=$1 ORDER BY created_at",
            sid,
        )
        events = await pool.fetchval("SELECT count(*) FROM records WHERE session_id=$1", sid)
        calls = await pool.fetchval(
            "SELECT coalesce(sum(o.model_calls), 0) FROM compaction_operations o"
            " JOIN compaction_jobs j USING (job_id) WHERE j.session_id=$1",
            sid,
        )
        jobs = await pool.fetch(
            "SELECT status, reason FROM compaction_jobs WHERE session_id=$1", sid
        )
    finally:
        await pool.close()
    sizes = [r["summary_tokens"] for r in revs]
    bound = revs[0]["bound_tokens"] if revs else None
    first10 = statistics.median(sizes[:10]) if sizes else 0
    tenth = max(1, questions // 10)
    q_first = statistics.median(m["question_s"][:tenth]) if m["question_s"] else 0.0
    q_last = statistics.median(m["question_s"][-tenth:]) if m["question_s"] else 0.0
    return {
        "questions": questions,
        "seconds": round(elapsed, 1),
        # Median wall time of a question in the first and the last tenth of the session.
        "question_s_first_tenth": round(q_first, 3),
        "question_s_last_tenth": round(q_last, 3),
        "question_s_growth": round(q_last / q_first, 2) if q_first else None,
        "events_committed": events,
        "prepares": m["prepares"],
        "prepares_refused": m["refused"],
        "refusals": m["refusals"],
        "max_prepared_ratio": round(max(m["ratios"], default=0.0), 4),
        "median_prepared_ratio": round(statistics.median(m["ratios"]), 4) if m["ratios"] else 0,
        "question_misses": m["misses"],
        "summaries_committed": len(sizes),
        "summary_bound_tokens": bound,
        "summary_max_tokens": max(sizes, default=0),
        "summary_last_tokens": sizes[-1] if sizes else 0,
        "summary_median_first_ten": first10,
        "summary_last_vs_median_first_ten": round(sizes[-1] / first10, 2) if first10 else None,
        "summaries_over_bound": sum(1 for x in sizes if bound is not None and x > bound),
        "rollups": sum(1 for r in revs if r["rolled"]),
        "summarizer_calls": calls,
        "summarizer_calls_per_1000_events": round(calls * 1000 / events, 1) if events else 0,
        "jobs": dict(Counter(f"{j['status']}:{j['reason']}" for j in jobs)),
        "summary_sizes": sizes,
    }


def verdict(r: dict[str, Any]) -> dict[str, bool]:
    return {
        "no refusal": r["prepares_refused"] == 0,
        "max prepared ratio <= 1.0": r["max_prepared_ratio"] <= 1.0,
        "summary within its bound throughout": r["summaries_over_bound"] == 0,
        "current question verbatim in every prepare (0 misses)": r["question_misses"] == 0,
    }


def table(r: dict[str, Any]) -> str:
    rows = [
        ("questions / events committed", f"{r['questions']} / {r['events_committed']}"),
        ("wall time", f"{r['seconds']} s"),
        (
            "a question, median: first / last tenth",
            f"{r['question_s_first_tenth']} / {r['question_s_last_tenth']} s"
            f" (x{r['question_s_growth']})",
        ),
        ("prepares / refused", f"{r['prepares']} / {r['prepares_refused']} {r['refusals']}"),
        (
            "prepared estimate / InputBudget",
            f"max {r['max_prepared_ratio']}, median {r['median_prepared_ratio']}",
        ),
        ("current question missing", str(r["question_misses"])),
        ("summaries committed (roll-ups)", f"{r['summaries_committed']} ({r['rollups']})"),
        (
            "summary tokens: bound / max / last",
            f"{r['summary_bound_tokens']} / {r['summary_max_tokens']} / {r['summary_last_tokens']}",
        ),
        (
            "summary last vs median of first ten",
            f"{r['summary_last_tokens']} vs {r['summary_median_first_ten']}"
            f" (x{r['summary_last_vs_median_first_ten']})",
        ),
        ("summaries over bound", str(r["summaries_over_bound"])),
        (
            "summarizer calls (per 1,000 events)",
            f"{r['summarizer_calls']} ({r['summarizer_calls_per_1000_events']})",
        ),
        ("jobs", str(r["jobs"])),
    ]
    w = max(len(a) for a, _ in rows)
    lines = [f"{a:<{w}}  {b}" for a, b in rows]
    lines += [
        f"{'target: ' + k:<{w}}  {'met' if ok else 'NOT MET'}" for k, ok in verdict(r).items()
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep-db", action="store_true")
    args = ap.parse_args()
    base = Settings()
    tag = uuid.uuid4().hex[:6]
    db = f"alc_bench_long_{tag}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(base.pg_dsn)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{db}"'))
    os.environ.update(
        {
            "ALC_PG_DSN": base.pg_dsn.rsplit("/", 1)[0] + "/" + db,
            "ALC_TOPIC_RECORDS": f"benchlong{tag}.records",
            "ALC_TOPIC_COMMITTED": f"benchlong{tag}.committed",
            "ALC_TOPIC_DEAD_LETTER": f"benchlong{tag}.deadletter",
            "ALC_TOPIC_COMPACTION_REQUESTS": f"benchlong{tag}.compaction.requests",
            "ALC_TOPIC_OBSERVABILITY": f"benchlong{tag}.observability",
            "ALC_COMPACTION_GROUP": f"alc-benchlong-compaction-{tag}",
            "ALC_PROCESSOR_ID": f"alc-benchlong-{tag}",
            "ALC_PROCESSOR_INSTANCE_ID": f"benchlong-{tag}",
            "ALC_PREPARE_PORT": str(base.prepare_port + 13),
            "ALC_LOG_LEVEL": "WARNING",
        }
    )
    s = Settings()
    log(f"database {db}, topics benchlong{tag}.*, {args.questions} questions, 16k profile")
    # INFO: the processor and the compaction service say "ready" at that level.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "ALC_LOG_LEVEL": "INFO"}
    logs = OUT / f"logs-long-{tag}"
    procs = service_set(env, logs, REPO, "127.0.0.1", s.prepare_port, sys.executable)
    try:
        asyncio.run(apply_dsn(s.pg_dsn))
        # The runtime's credential (R15.4): a host key of the "bench" space, read by the SDK.
        os.environ["ALC_API_KEY"] = asyncio.run(
            issue(s.pg_dsn, "bench", KeyKind.HOST, issuer=issuer_secret(s))
        ).key
        asyncio.run(ensure_bus(s))
        procs.start()
        log(f"services up (logs in {logs})")
        result = asyncio.run(
            measure(s, f"http://127.0.0.1:{s.prepare_port}", args.questions, args.seed)
        )
    finally:
        procs.stop()
        if not args.keep_db:
            asyncio.run(admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "long_session.json").write_text(json.dumps(result, indent=2))
    print(table(result))
    print(f"\n[bench-long] wrote {OUT / 'long_session.json'}")


if __name__ == "__main__":
    main()
