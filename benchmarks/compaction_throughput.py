"""``python -m benchmarks.compaction_throughput``: committed compaction jobs per second
with 1 and with 2 compaction worker processes (issue 13).

Each phase runs the real services (Prepare, the session processor and ``workers``
processes of ``python -m services.compaction`` sharing one consumer group, each running
up to ``ALC_COMPACTION_CONCURRENCY`` jobs at once) with the built-in extractive
summarizer. ``--sessions`` sessions are seeded, each with a first run of ``--rounds``
tool rounds and a second question, under a policy whose only trigger is
``user_turns: 2``; nothing is checked while seeding (no prepare, so no pre-emptive
check either), so no job starts early. Then every session is prepared at once: each
prepare's check starts one job. The rate is read from the database: committed jobs
divided by the time from the first job requested to the last one committed (the
processor's transaction times, so client-side delays do not count).

Why fresh topics and a fresh consumer group per phase: the group reads from the earliest
offset, and static members of an earlier phase would keep partitions until their session
timeout; a phase must start on an empty, settled group.

Prints a table and writes ``build/bench/compaction_throughput.json``. Uses its own
database (``alc_bench_cmpt_<tag>``, dropped at the end unless ``--keep-db``), topics and
consumer groups, against the stack ``deploy/stack.sh up`` started (or ``ALC_*``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from benchmarks.run import first_prepare, wait_offsets
from devstack.launcher import Proc, service_set
from domain.auth import KeyKind
from schemas.contracts import ContextEvent
from schemas.settings import Settings
from services.sdk.client import ContextClient, RunHandle
from storage.api_keys import issue
from storage.migrate import apply_dsn
from storage.pool import create_pool
from streams.kafka.bus_secrets import issuer_secret
from streams.kafka.provision import ensure_bus

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "bench"
POLICY = {
    "recent_complete_groups": 1,
    # The second question is the only trigger: a job per session, exactly when asked.
    "compaction": {"context_ratio": None, "user_turns": 2},
}
PROFILE = {
    "name": "bench-128k",
    "context_capacity": 128_000,
    "output_reserve": 0,
    "safety_margin": 0,
}
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
ASSIGNED = re.compile(r"compaction partitions assigned: \[([0-9, ]*)\]")


def log(msg: str) -> None:
    print(f"[bench-cmp-throughput] {msg}", flush=True)


def first_run(run: RunHandle, rounds: int, result_words: int) -> list[ContextEvent]:
    """A question and ``rounds`` model steps each reading a file (a ~``result_words``
    word result) with an answer: compressible history for one job."""
    from devstack.events import assistant, outcome, user  # the builders the tests use too

    out = [user(run, "Where is the fetch limit set, and is it the same everywhere?", "q1")]
    for r in range(rounds):
        call = f"c{r}"
        args = json.dumps({"path": f"src/pkg_{r}/handlers.py"})
        out.append(assistant(run, f"Reading pkg_{r}.", f"op{r}a", ((call, "read_file", args),)))
        body = "\n".join(
            f"src/pkg_{r}/handlers.py:{i}: return store.fetch(key='k{r}-{i}', limit={i % 50})"
            for i in range(max(1, result_words // 8))
        )
        out.append(outcome(run, call, "read_file", body))
        out.append(assistant(run, f"pkg_{r} sets limit {r % 50}.", f"op{r}b"))
    return out


async def seed(
    c: ContextClient, release_id: str, sessions: int, rounds: int, words: int
) -> list[RunHandle]:
    """``sessions`` sessions, each with a finished first run and a second run holding a
    new question; returns the second runs (whose prepare fires the trigger)."""
    from devstack.events import user

    gate = asyncio.Semaphore(8)  # HTTP calls in flight: enough to overlap, not a storm

    async def one(n: int) -> RunHandle:
        async with gate:
            sess = await c.open_session("bench", f"actor-{n}", release_id)
            run = await c.start_run(sess)
            await c.producer.send_many(first_run(run, rounds, words))
            await c.finish_run(run)  # waits until the processor accepted it
            second = await c.start_run(sess)
            await c.producer.send_many([user(second, "And in the tests?", "q2")])
            return second

    return list(await asyncio.gather(*(one(n) for n in range(sessions))))


async def settle_jobs(pool: asyncpg.Pool, sessions: list[str], timeout: float) -> None:
    """Until every session has its job and none is still running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = await pool.fetchrow(
            "SELECT count(DISTINCT session_id) AS with_job,"
            " count(*) FILTER (WHERE status = 'requested') AS running"
            " FROM compaction_jobs WHERE session_id = ANY($1::text[])",
            sessions,
        )
        assert row is not None
        if row["with_job"] >= len(sessions) and row["running"] == 0:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("compaction jobs did not finish in time")


async def rates(pool: asyncpg.Pool, sessions: list[str]) -> dict[str, Any]:
    """The phase's numbers, from the processor's own timestamps."""
    row = await pool.fetchrow(
        "SELECT count(*) AS jobs, count(*) FILTER (WHERE status = 'committed') AS committed,"
        " extract(epoch FROM max(finished_at) FILTER (WHERE status = 'committed')"
        "   - min(created_at)) AS span_s,"
        " extract(epoch FROM max(finished_at) FILTER (WHERE status = 'committed')"
        "   - min(finished_at) FILTER (WHERE status = 'committed')) AS commit_span_s,"
        " percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP"
        "   (ORDER BY extract(epoch FROM finished_at - created_at))"
        "   FILTER (WHERE status = 'committed') AS latency_s"
        " FROM compaction_jobs WHERE session_id = ANY($1::text[])",
        sessions,
    )
    assert row is not None
    covered = await pool.fetchval(
        "SELECT avg(covered_tokens) FROM summary_revisions WHERE session_id = ANY($1::text[])",
        sessions,
    )
    # Where a job's time goes: until the worker saved its candidate (queue + summarize),
    # the rest is the outcome's way back through ctx.records to the processor's commit.
    saved = await pool.fetchval(
        "SELECT percentile_cont(0.5) WITHIN GROUP"
        " (ORDER BY extract(epoch FROM o.created_at - j.created_at))"
        " FROM compaction_jobs j JOIN compaction_operations o USING (job_id)"
        " WHERE j.session_id = ANY($1::text[]) AND j.status = 'committed'",
        sessions,
    )
    committed, span = int(row["committed"]), float(row["span_s"] or 0.0)
    commits = float(row["commit_span_s"] or 0.0)
    latency = row["latency_s"] or [0.0, 0.0]
    return {
        "jobs": int(row["jobs"]),
        "jobs_committed": committed,
        "seconds": round(span, 3),
        "jobs_per_s": round(committed / span, 1) if span > 0 else None,
        # First to last commit: the start-up of the burst left out.
        "steady_jobs_per_s": round((committed - 1) / commits, 1) if commits > 0 else None,
        "job_latency_p50_ms": round(latency[0] * 1000, 1),
        "job_latency_p99_ms": round(latency[1] * 1000, 1),
        "candidate_saved_p50_ms": round(float(saved or 0) * 1000, 1),
        "avg_covered_tokens": round(float(covered or 0)),
    }


def wait_assigned(procs: list[Proc], partitions: int, timeout: float = 120) -> None:
    """Until the group has settled: every process's latest assignment, together, covers
    each partition exactly once (a join rebalances the processes that came before)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        latest: list[list[int] | None] = []
        for p in procs:
            found = ASSIGNED.findall(p.log_path.read_text(errors="replace"))
            latest.append([int(x) for x in found[-1].split(",") if x.strip()] if found else None)
        owned = sorted(tp for tps in latest for tp in tps or [])
        if None not in latest and owned == list(range(partitions)):
            return
        time.sleep(0.2)
    raise TimeoutError(f"compaction group not settled over {partitions} partitions")


def phase_env(tag: str, workers: int, concurrency: int) -> dict[str, str]:
    """A phase's own topics, groups and process ids (the database is shared)."""
    t = f"benchcmpt{tag}w{workers}"
    return {
        "ALC_TOPIC_RECORDS": f"{t}.records",
        "ALC_TOPIC_COMMITTED": f"{t}.committed",
        "ALC_TOPIC_DEAD_LETTER": f"{t}.deadletter",
        "ALC_TOPIC_COMPACTION_REQUESTS": f"{t}.compaction.requests",
        "ALC_TOPIC_OBSERVABILITY": f"{t}.observability",
        "ALC_COMPACTION_GROUP": f"alc-{t}-compaction",
        "ALC_COMPACTION_CONCURRENCY": str(concurrency),
        "ALC_PROCESSOR_ID": f"alc-{t}",
        "ALC_PROCESSOR_INSTANCE_ID": f"{t}-processor",
    }


async def drive(s: Settings, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Seed the sessions, prepare them all at once, wait for their jobs, read the rates."""
    pool = await create_pool(s.pg_dsn, 1, 2)
    try:
        async with ContextClient(s.kafka_bootstrap, url, topic=s.topic_records) as c:
            rel = await c.register_release(
                agent_id="bench-cmpt",
                instructions="You are a careful benchmark agent.",
                tool_catalog=TOOLS,
                model_profile=PROFILE,
                context_policy=POLICY,
            )
            t0 = time.perf_counter()
            runs = await seed(c, rel["release_id"], args.sessions, args.rounds, args.words)
            await wait_offsets(pool, s, dict(c.producer.last_offsets))
            log(f"  seeded {len(runs)} sessions in {time.perf_counter() - t0:.1f} s")
            # The burst: every check at once, so the jobs queue up in the requests topic.
            await asyncio.gather(*(first_prepare(c, r) for r in runs))
        sessions = [r.session_id for r in runs]
        await settle_jobs(pool, sessions, timeout=args.timeout)
        return await rates(pool, sessions)
    finally:
        await pool.close()


def phase(tag: str, workers: int, args: argparse.Namespace) -> dict[str, Any]:
    os.environ.update(phase_env(tag, workers, args.concurrency))
    s = Settings()
    asyncio.run(ensure_bus(s))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "ALC_LOG_LEVEL": "INFO"}
    logs = OUT / f"logs-cmpt-{tag}"
    core = service_set(env, logs, REPO, "127.0.0.1", s.prepare_port, sys.executable, f"-w{workers}")
    compaction = [
        service_set(
            {**env, "ALC_COMPACTION_INSTANCE_ID": f"benchcmpt{tag}w{workers}-{i}"},
            logs, REPO, "127.0.0.1", s.prepare_port, sys.executable, f"-w{workers}-{i}",
        ).compaction
        for i in range(workers)
    ]  # fmt: skip
    procs = [core.prepare, core.processor, *compaction]
    try:
        for p in procs:
            p.start()
        wait_assigned(compaction, s.topic_partitions)
        log(f"{workers} worker(s) x concurrency {args.concurrency}: group settled (logs {logs})")
        row = asyncio.run(drive(s, f"http://127.0.0.1:{s.prepare_port}", args))
    finally:
        for p in reversed(procs):
            p.stop()
    row = {"workers": workers, "concurrency": args.concurrency, **row}
    log(
        f"  {row['jobs_committed']}/{row['jobs']} jobs committed in {row['seconds']} s:"
        f" {row['jobs_per_s']} jobs/s (first to last commit {row['steady_jobs_per_s']}/s);"
        f" job latency p50 {row['job_latency_p50_ms']} ms, p99 {row['job_latency_p99_ms']} ms"
        f" (candidate saved at p50 {row['candidate_saved_p50_ms']} ms)"
    )
    return row


def table(r: dict[str, Any]) -> str:
    lines = [
        "",
        f"Compaction throughput — {r['sessions']} sessions, one job each ({r['rounds']} tool"
        " rounds compacted per job); extractive summarizer; rate = committed jobs / (first"
        " requested → last committed)",
        "",
        "| workers | concurrency each | jobs committed | seconds | jobs/s |"
        " first→last commit jobs/s | job latency p50 ms | p99 ms |"
        " candidate saved p50 ms | vs 1 worker |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    one = next((w["jobs_per_s"] for w in r["workers"] if w["workers"] == 1), None)
    for w in r["workers"]:
        ratio = f"{w['jobs_per_s'] / one:.2f}" if one and w["jobs_per_s"] else "n/a"
        lines.append(
            f"| {w['workers']} | {w['concurrency']} | {w['jobs_committed']}/{w['jobs']} |"
            f" {w['seconds']} | {w['jobs_per_s']} | {w['steady_jobs_per_s']} |"
            f" {w['job_latency_p50_ms']} | {w['job_latency_p99_ms']} |"
            f" {w['candidate_saved_p50_ms']} | {ratio} |"
        )
    return "\n".join(lines)


def speedup(rows: list[dict[str, Any]]) -> float | None:
    """jobs/s with 2 workers over jobs/s with 1, when both were measured."""
    rate = {w["workers"]: w["jobs_per_s"] for w in rows}
    return round(rate[2] / rate[1], 2) if rate.get(1) and rate.get(2) else None


async def _admin(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", type=int, default=100, help="one job per session")
    ap.add_argument("--rounds", type=int, default=8, help="tool rounds in the first run")
    ap.add_argument("--words", type=int, default=240, help="~words per tool result")
    ap.add_argument("--workers", default="1,2", help="compaction processes per phase")
    ap.add_argument("--concurrency", type=int, default=Settings().compaction_concurrency)
    ap.add_argument("--timeout", type=float, default=600, help="per phase, for the jobs")
    ap.add_argument("--keep-db", action="store_true", help="keep alc_bench_cmpt_<tag>")
    args = ap.parse_args()
    base = Settings()
    tag = uuid.uuid4().hex[:6]
    db = f"alc_bench_cmpt_{tag}"
    asyncio.run(_admin(base.pg_dsn, f'CREATE DATABASE "{db}"'))
    os.environ.update(
        {
            "ALC_PG_DSN": base.pg_dsn.rsplit("/", 1)[0] + "/" + db,
            "ALC_PREPARE_PORT": str(base.prepare_port + 13),
            # Instance slots of our own: never the dev stack's .state.
            "ALC_STATE_DIR": str(OUT / f"state-cmpt-{tag}"),
        }
    )
    dsn = os.environ["ALC_PG_DSN"]
    results: dict[str, Any] = {
        "machine": {"cores": os.cpu_count(), "loadavg_1m_at_start": os.getloadavg()[0]},
        "sessions": args.sessions,
        "rounds": args.rounds,
        "summarizer": "extractive",
        "workers": [],
    }
    try:
        asyncio.run(apply_dsn(dsn))
        # The runtime's credential (R15.4): a host key of the "bench" space, read by the SDK.
        os.environ["ALC_API_KEY"] = asyncio.run(
            issue(dsn, "bench", KeyKind.HOST, issuer=issuer_secret(Settings()))
        ).key
        for workers in (int(x) for x in args.workers.split(",")):
            results["workers"].append(phase(tag, workers, args))
        results["speedup_2_vs_1"] = speedup(results["workers"])
    finally:
        if not args.keep_db:
            asyncio.run(_admin(base.pg_dsn, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "compaction_throughput.json").write_text(json.dumps(results, indent=2))
    print(table(results))
    print(f"\n[bench-cmp-throughput] wrote {OUT / 'compaction_throughput.json'}")


if __name__ == "__main__":
    main()
