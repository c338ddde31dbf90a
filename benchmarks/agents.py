"""``python -m benchmarks.agents`` (in ``make bench``): many agents at once, and where a
step's CPU goes.

K agents (``--agents``, default 4,16,48) share one runtime process — this one, one SDK
client (``services.sdk``) — and each loops over questions: start a run, the question,
prepare, a model step calling one tool, the tool's ~1.5 KB result, prepare, the answer,
finish. A 16k model profile and compaction every 4 questions (``user_turns: 4``).
Prepare, the session processor, the compaction and analytics services run as their own
OS processes (``devstack.launcher.service_set``) on a database, topics and groups of
this run's own, against the stack ``make up`` started.

Per K, after ``--warmup`` seconds, a window of ``--seconds``: agent steps/s (a step is a
model call: one prepare answered), prepare p50/p99 as the agent waits for it (its
appends committed, then the context) and Prepare's own assemble time, errors, committed
compactions; and CPU per step per process from ``/proc`` (``benchmarks.proc_cpu``): the
SDK (this process), Prepare, the processor (with its offloaded child), compaction,
analytics, the broker (java), PostgreSQL (the backends of this run's database, and
apart every other postgres process), the rest of the machine (other work on a shared
machine: noise), and the whole machine.

``--profile``: py-spy flame graphs of each service during the last K's window
(``benchmarks.flame``). ``--quick``: 8 agents, a 20 s window (CI, ``benchmarks.compare
--gate``). Prints a table; writes ``build/bench/agents.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from benchmarks import proc_cpu
from benchmarks.flame import Recorder
from benchmarks.soak import admin, drop_scratch, provision, scratch_env
from devstack.launcher import ServiceSet, service_set
from devstack.ports import free_port
from schemas.settings import Settings
from services.sdk.client import ApiError, ContextClient

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "bench"
SPACE = "agents"
PROFILE = {"name": "agents-16k", "context_capacity": 16_384, "output_reserve": 2_048,
           "safety_margin": 512}  # fmt: skip
POLICY = {"recent_complete_groups": 1, "compaction": {"user_turns": 4, "context_ratio": 0.8}}
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
TOOL_RESULT_BYTES = 1500
# The per-process columns, in the table's order (the services by their launcher names).
SERVICES = ("prepare", "processor", "compaction", "analytics")
OURS = ("sdk", *SERVICES, "broker", "postgres")
# "ours": the sum of the columns before it, what the benchmark's own processes cost (the
# machine's other work, a shared machine's noise, excluded); "machine": every process.
COLUMNS = (*OURS, "ours", "postgres_other", "rest", "machine")
# PostgreSQL's backends apart by the process they serve (part of "postgres").
PG_COLUMNS = tuple(f"pg:{name}" for name in ("sdk", *SERVICES))


def log(msg: str) -> None:
    print(f"[bench-agents] {msg}", flush=True)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))] if s else 0.0


@dataclass
class Stats:
    """What the agents of one K did: (monotonic time answered, ms the agent waited,
    Prepare's assemble ms, Prepare's wait for the appends' commit in ms) per step, and
    the errors by code."""

    steps: list[tuple[float, float, float, float]] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    questions: int = 0

    def window(self, t0: float, t1: float) -> list[tuple[float, float, float, float]]:
        return [s for s in self.steps if t0 <= s[0] < t1]


def tool_result(rng: random.Random, size: int = TOOL_RESULT_BYTES) -> str:
    """A file's lines, ~``size`` bytes."""
    lines, n = [], 0
    while n < size:
        line = f"    v{rng.randrange(10**6)} = compute(a{rng.randrange(99)}, {rng.random():.6f})"
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines)


class Agent:
    """One agent of the shared runtime: its session, questions in a row. ``model_ms``:
    the model's time for each call, between a prepare's answer and the append of the
    model's result (uniform in 0.5-1.5x; 0: the model answers at once)."""

    def __init__(
        self, c: ContextClient, name: str, stats: Stats, seed: int, model_ms: float = 0.0
    ) -> None:
        self.c, self.name, self.stats = c, name, stats
        self.rng = random.Random(seed)
        self.model_s = model_ms / 1000
        self.model_rng = random.Random(seed + 1_000_003)  # the content's draws stay alike

    async def run(self, release_id: str, stop: asyncio.Event) -> None:
        session = await self.c.open_session(SPACE, f"user-{self.name}", release_id, self.name)
        n = 0
        while not stop.is_set():
            try:
                await self.question(session, n)
                self.stats.questions += 1
            except Exception as exc:  # counted and shown: the load goes on
                code = exc.code if isinstance(exc, ApiError) else type(exc).__name__
                self.stats.errors[code] += 1
                log(f"{self.name} question {n}: {code}: {str(exc)[:200]}")
                await asyncio.sleep(0.5)
            n += 1

    async def question(self, session: dict[str, Any], n: int) -> None:
        c, rng = self.c, self.rng
        run_id = f"{self.name}-r{n}"
        run = await c.start_run(session, run_id)
        try:
            text = f"Q{n}: why does module m{rng.randrange(40)} fail with code {rng.random()}?"
            await c.append_user(run, text, f"q{n}")
            await self.step(run)
            call = f"{run_id}-c0"
            args = json.dumps({"path": f"src/m{n % 40}/file{rng.randrange(9)}.py"})
            await c.append_model_result(
                run, "Reading it.", f"{call}-m", [(call, "read_file", args)]
            )
            await c.append_tool_outcome(run, call, "read_file", tool_result(rng))
            await self.step(run)
            await c.append_model_result(run, f"Answer {n}: the guard is missing.", f"{run_id}-a")
        finally:
            with contextlib.suppress(ApiError, OSError, TimeoutError):
                await c.finish_run(run, event_key=f"finish:{run_id}")

    async def step(self, run: Any) -> None:
        t = time.perf_counter()
        prepared = await self.c.prepare(run)
        waited = (time.perf_counter() - t) * 1000
        timing = prepared.get("timing") or {}
        server = float(timing.get("assemble_ms") or 0.0)
        commit = float(timing.get("commit_wait_ms") or 0.0)
        self.stats.steps.append((time.monotonic(), waited, server, commit))
        if self.model_s:
            await asyncio.sleep(self.model_s * self.model_rng.uniform(0.5, 1.5))


async def backends_by_client(dsn: str, database: str, g: proc_cpu.Groups) -> dict[str, set[int]]:
    """The PostgreSQL backends of ``database`` by the column whose process is their
    client (matched by the client's TCP port): ``pg:prepare``, ``pg:processor``..."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT pid, client_port FROM pg_stat_activity WHERE datname = $1", database
        )
    finally:
        await conn.close()
    owners = {port: name for name in ("sdk", *SERVICES) for port in
              proc_cpu.local_ports(g.pids.get(name, set()))}  # fmt: skip
    out: dict[str, set[int]] = {}
    for r in rows:
        if (name := owners.get(r["client_port"])) is not None:
            out.setdefault(f"pg:{name}", set()).add(r["pid"])
    return out


def groups(services: ServiceSet, s: Settings, database: str) -> proc_cpu.Groups:
    """The pids of each column, read now (the services' children included; the SDK is
    this process alone: py-spy, when profiling, is a child of it)."""
    snap = proc_cpu.snapshot()
    g = proc_cpu.Groups({"sdk": {os.getpid()}})
    for name in SERVICES:
        proc = getattr(services, name)
        if proc is not None and proc.popen is not None:
            g.pids[name] = proc_cpu.descendants(snap, proc.popen.pid)
    g.pids["broker"] = proc_cpu.kafka_brokers(snap, int(s.kafka_bootstrap.rsplit(":", 1)[1]))
    g.pids["postgres"], g.pids["postgres_other"] = proc_cpu.postgres_split(snap, database)
    return g


async def transactions(dsn: str, database: str) -> int:
    """PostgreSQL's count of transactions in ``database`` so far (each query outside a
    transaction block is one): round trips that wrote or read, as the server saw them.
    Backends report it at most once a second, so a window's count is that close."""
    conn = await asyncpg.connect(dsn)
    try:
        n = await conn.fetchval(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1",
            database,
        )
    finally:
        await conn.close()
    return int(n or 0)


async def compactions(dsn: str, prefix: str) -> dict[str, int]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT status, count(*) AS n FROM compaction_jobs WHERE session_id LIKE $1"
            " GROUP BY status",
            prefix + "%",
        )
    finally:
        await conn.close()
    return {r["status"]: int(r["n"]) for r in rows}


@dataclass(frozen=True)
class Level:
    agents: int
    warmup: float
    seconds: float
    profile: Recorder | None = None
    model_ms: float = 0.0


async def level(
    c: ContextClient, release_id: str, lv: Level, services: ServiceSet, s: Settings, db: str
) -> dict[str, Any]:
    """K agents for warm-up + window; the window's measures."""
    stats, stop = Stats(), asyncio.Event()
    prefix = f"{SPACE}-k{lv.agents}-{uuid.uuid4().hex[:4]}-"
    agents = [Agent(c, f"{prefix}{i:03d}", stats, i, lv.model_ms) for i in range(lv.agents)]
    tasks = [asyncio.create_task(a.run(release_id, stop)) for a in agents]
    await asyncio.sleep(lv.warmup)
    # Analyzed as autovacuum analyzes a deployment's tables, within a minute of their
    # growing. This database started empty, and autovacuum does not get to it within a
    # run: every statement kept the plan made on the empty tables (one generic plan per
    # connection, ``Settings.pg_plan_cache_mode``, until the tables are analyzed), and
    # the processor's lookup of a batch's keys read all of ``records`` (0.76 ms a call,
    # 0.05 ms replanned: docs/scaling.md, eleventh stop).
    await admin(s.pg_dsn, "ANALYZE")
    if lv.profile is not None:
        pids = {n: p.popen.pid for n in SERVICES if (p := getattr(services, n)) and p.popen}
        lv.profile.start({"sdk": os.getpid(), **pids}, lv.seconds, ("processor",))
    xact0 = await transactions(s.pg_dsn, db)
    t0, before = time.monotonic(), proc_cpu.snapshot()
    await asyncio.sleep(lv.seconds)
    t1, after = time.monotonic(), proc_cpu.snapshot()
    xacts = await transactions(s.pg_dsn, db) - xact0
    g = groups(services, s, db)
    g.pids.update(await backends_by_client(s.pg_dsn, db, g))
    policies = proc_cpu.cpu_policies(g)
    stop.set()
    await asyncio.gather(*tasks)
    window = stats.window(t0, t1)
    cpu = g.seconds(before, after)
    cpu["machine"] = proc_cpu.machine_seconds(before, after)
    cpu["ours"] = sum(cpu[k] for k in OURS)
    cpu["rest"] = max(0.0, cpu["machine"] - cpu["ours"] - cpu["postgres_other"])
    steps = len(window)
    waited, server = [s[1] for s in window], [s[2] for s in window]
    commit = [s[3] for s in window]
    return {
        "agents": lv.agents,
        "model_ms": lv.model_ms,
        "window_s": round(t1 - t0, 2),
        "steps": steps,
        "steps_per_s": round(steps / (t1 - t0), 2),
        "questions": stats.questions,
        "prepare_p50_ms": round(pct(waited, 50), 2),
        "prepare_p99_ms": round(pct(waited, 99), 2),
        "server_p50_ms": round(pct(server, 50), 3),
        "server_p99_ms": round(pct(server, 99), 3),
        "commit_wait_p50_ms": round(pct(commit, 50), 3),
        "commit_wait_p99_ms": round(pct(commit, 99), 3),
        "errors": sum(stats.errors.values()),
        "errors_by_code": dict(stats.errors),
        "compactions": await compactions(s.pg_dsn, prefix),
        "pg_transactions_per_step": round(xacts / max(steps, 1), 1),
        "machine_busy": round(proc_cpu.busy_share(before, after), 3),
        "cpu_policies": policies,
        "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "cpu_ms_per_step": {k: round(v * 1000 / max(steps, 1), 2) for k, v in cpu.items()},
    }


async def drive(args: argparse.Namespace, services: ServiceSet, s: Settings, url: str,
                key: str, db: str) -> list[dict[str, Any]]:  # fmt: skip
    out = []
    async with ContextClient(s.kafka_bootstrap, url, s.topic_records, api_key=key) as c:
        rel = await c.register_release(
            agent_id="agents", instructions="You are a careful engineer. Answer from the tools.",
            tool_catalog=TOOLS, model_profile=PROFILE, context_policy=POLICY,
        )  # fmt: skip
        ks, models = args.agents.split(","), args.model_ms.split(",")
        plan = [(float(m), int(k)) for m in models for k in ks]
        for i, (model_ms, k) in enumerate(plan):
            last = args.profile and i == len(plan) - 1
            rec = Recorder(OUT, f"agents-flame-k{k}") if last else None
            log(f"{k} agents, model {model_ms:g} ms: {args.warmup:.0f} s warm-up, then a"
                f" {args.seconds:.0f} s window")  # fmt: skip
            lv = Level(k, args.warmup, args.seconds, rec, model_ms)
            row = await level(c, rel["release_id"], lv, services, s, db)
            if rec is not None:
                for name, head in rec.finish().items():
                    log(f"profile of {name} (build/bench/agents-flame-k{k}-{name}.*):\n{head}")
            log(line(row))
            out.append(row)
    return out


def line(r: dict[str, Any]) -> str:
    return (
        f"{r['agents']} agents: {r['steps_per_s']} steps/s, prepare p50 {r['prepare_p50_ms']}"
        f" / p99 {r['prepare_p99_ms']} ms (server {r['server_p50_ms']} / {r['server_p99_ms']},"
        f" commit wait {r.get('commit_wait_p50_ms')} / {r.get('commit_wait_p99_ms')}),"
        f" {r['errors']} errors, compactions {r['compactions']},"
        f" model {r['model_ms']:g} ms a call, the machine {r['machine_busy']:.0%} busy,"
        f" {r['pg_transactions_per_step']} PostgreSQL transactions per step,"
        f" CPU per step {r['cpu_ms_per_step']['ours']} ms ours,"
        f" {r['cpu_ms_per_step']['machine']} ms the machine's;"
        f" CPU policies {r.get('cpu_policies')}"
    )


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| agents | agent steps/s | prepare p50 | p99 | server p50 / p99 | errors |"
        " compactions | PostgreSQL transactions per step | CPU per step: ours / machine |"
        " machine busy |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {_who(r)} | {r['steps_per_s']} | {r['prepare_p50_ms']:.0f} ms |"
            f" {r['prepare_p99_ms']:.0f} ms | {r['server_p50_ms']:.1f} / {r['server_p99_ms']:.1f}"
            f" ms | {r['errors']} | {r['compactions'].get('committed', 0)} |"
            f" {r['pg_transactions_per_step']} |"
            f" {r['cpu_ms_per_step']['ours']:.1f} / {r['cpu_ms_per_step']['machine']:.1f} ms |"
            f" {r['machine_busy']:.0%} |"
        )
    for title, cols in (("per process", COLUMNS), ("PostgreSQL by its client", PG_COLUMNS)):
        lines += ["", f"CPU ms per agent step, {title}:", ""]
        lines.append("| agents | " + " | ".join(cols) + " |")
        lines.append("|---:|" + "---:|" * len(cols))
        for r in rows:
            cells = " | ".join(f"{r['cpu_ms_per_step'].get(k, 0):.1f}" for k in cols)
            lines.append(f"| {_who(r)} | {cells} |")
    return "\n".join(lines)


def _who(r: dict[str, Any]) -> str:
    """A level's agents, and its model's time a call when it has one."""
    model = r.get("model_ms") or 0
    return f"{r['agents']}, model {model:g} ms" if model else str(r["agents"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", default="4,16,48", help="K values, one window each")
    ap.add_argument("--seconds", type=float, default=40.0, help="measured window per K")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds before each window")
    ap.add_argument("--model-ms", default="0",
                    help="each model call's time, ms; a list runs every K at each")  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="CI: 8 agents, 5 s + 20 s")
    ap.add_argument("--profile", action="store_true", help="py-spy flame graphs, last K")
    ap.add_argument("--keep-db", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.agents, args.seconds, args.warmup = "8", 20.0, 5.0
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    base = Settings()
    tag = uuid.uuid4().hex[:6]
    db = f"alc_agents_{tag}"
    asyncio.run(admin(base.pg_dsn, f'CREATE DATABASE "{db}"'))
    port = free_port()
    os.environ.update(scratch_env("agents", tag, base.pg_dsn))
    os.environ.update({
        "ALC_ANALYTICS_GROUP": f"alc-agents-analytics-{tag}",
        "ALC_PROCESSOR_INSTANCE_ID": f"agents-{tag}",
        "ALC_COMPACTION_INSTANCE_ID": f"agents-compaction-{tag}",
        "ALC_PREPARE_PORT": str(port),
    })  # fmt: skip
    s = Settings()
    logs = OUT / f"logs-agents-{tag}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    services = service_set(env, logs, REPO, "127.0.0.1", port, sys.executable)
    log(f"database {db}, topics agents{tag}.*, logs in {logs}")
    try:
        key = asyncio.run(provision(s, SPACE))
        services.start(with_compaction=True, with_analytics=True)
        rows = asyncio.run(drive(args, services, s, f"http://127.0.0.1:{port}", key, db))
    finally:
        services.stop()
        if not args.keep_db:
            drop_scratch(base.pg_dsn, db, s)
    config = {"profile": PROFILE, "policy": POLICY, "tool_result_bytes": TOOL_RESULT_BYTES,
              "warmup_s": args.warmup, "window_s": args.seconds,
              "model_ms": [float(m) for m in args.model_ms.split(",")]}  # fmt: skip
    result = {"machine": {"cores": os.cpu_count()}, "quick": args.quick, "levels": rows,
              "config": config}  # fmt: skip
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "agents.json").write_text(json.dumps(result, indent=2))
    print(table(rows))
    print(f"\n[bench-agents] wrote {OUT / 'agents.json'}")
    sys.exit(1 if any(r["errors"] for r in rows) else 0)


if __name__ == "__main__":
    main()
