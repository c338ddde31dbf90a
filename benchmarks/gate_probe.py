"""``python -m benchmarks.gate_probe``: the regression gate's three measures (issue 37
item 4) on one service set, started once; a round is ~20 s on our 2-core machine.

``benchmarks.compare --gate`` runs two of these with ``--driven`` (a round each time it
is told on stdin), one per side, each with the code of the side's commit (cwd and
``PYTHONPATH`` the side's worktree; the probe itself is this checkout's file, run with
``python -P``, so that both sides run one workload: it imports only what the
baseline's tree has too, and a gate none of whose baseline rounds ran fails). On a
database, topics and groups of its own against the stack ``make up`` (or the tests)
started, with Prepare, the processor, the compaction and analytics services as their
own OS processes (as ``benchmarks.agents`` runs them), it first seeds a thread of
``--records`` records and builds its view; then each round measures:

1. CPU per agent step: ``--agents`` agents (``benchmarks.agents``' loop: a question, a
   tool call, two prepares, compaction every 4 questions), ``--warmup`` s, then a window
   of ``--seconds``: CPU ms per step of our processes (SDK, services, broker,
   PostgreSQL), as ``benchmarks.agents`` reports it;
2. the processor's CPU per event: ``--events`` events over 50 new sessions (as
   ``benchmarks.run`` ingests) sent at once, the processor's CPU (its offloaded child
   included) from the send until the last one is committed, per event;
3. Prepare's p99 at 10k records: ``--prepare-calls`` prepares of the seeded thread, one
   at a time, once the round's writes are analyzed: the server's assemble time
   (``timing.assemble_ms``) p50 and p99, as ``benchmarks.run`` measures it (warm).
   ``--driven``, the driver asks for them in batches, the two sides' batches
   alternating (a machine's load moves within a round: the sides see the same), from a
   Prepare started afresh for them (``fresh``): a process's tail (where its collector's
   passes fall, how its heap grew) is drawn again each round, so that the rounds' spread
   shows it instead of one process's luck setting a side's p99 for the whole run.

Without ``--driven``: one round; ``build/bench/gate_probe.json`` under the cwd.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from benchmarks import agents as ag
from benchmarks import run as rn
from benchmarks.soak import admin, drop_scratch, provision, scratch_env
from devstack.launcher import ServiceSet, service_set
from devstack.ports import free_port
from schemas.settings import Settings
from services.sdk.client import ContextClient
from storage.pool import create_pool

OUT = Path.cwd() / "build" / "bench"
SESSIONS = 50
# Both sides' services start at once (8 processes on 2 cores, maybe beside other work):
# more than Proc.start's default 90 s may pass before the last one is ready.
START_TIMEOUT_S = 240.0
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[gate-probe {time.monotonic() - T0:5.1f} s] {msg}", flush=True)


def last(sent: list[tuple[int, int]]) -> dict[int, int]:
    """The last offset sent to each partition."""
    out: dict[int, int] = {}
    for p, o in sent:
        out[p] = max(out.get(p, -1), o)
    return out


def start(services: ServiceSet) -> None:
    """The four services at once (``ServiceSet.start`` starts them one after the other,
    for Prepare to create the topics first: ``provision`` has created them here)."""
    procs = [services.prepare, services.processor, services.compaction, services.analytics]
    with ThreadPoolExecutor(len(procs)) as pool:
        for done in [pool.submit(p.start, START_TIMEOUT_S) for p in procs if p is not None]:
            done.result()


@dataclass
class World:
    """One side's services and what every round reuses: the client, the two releases,
    and the thread of ``--records`` records the prepares read (seeded once)."""

    c: ContextClient
    services: ServiceSet
    s: Settings
    url: str
    db: str
    agents_release: str = ""
    bench_release: str = ""
    thread: Any = None


async def seed(w: World, records: int) -> None:
    """The releases, and the prepares' thread: ``records`` records sent at once, then a
    first prepare that builds its view (the rounds' prepares are warm, as in
    ``benchmarks.run``)."""
    agents = await w.c.register_release(
        agent_id="agents", instructions="You are a careful engineer. Answer from the tools.",
        tool_catalog=ag.TOOLS, model_profile=ag.PROFILE, context_policy=ag.POLICY,
    )  # fmt: skip
    w.agents_release = agents["release_id"]
    w.bench_release = (
        await w.c.register_release(
            agent_id="bench", instructions="Benchmark agent.", model_profile=rn.PROFILE
        )
    )["release_id"]
    w.thread = await w.c.start_run(await w.c.open_session(ag.SPACE, "bench", w.bench_release))
    evs = (await rn._events_for(w.thread, max(1, records // 5), "p"))[:records]
    sent = await w.c.producer.send_many(evs)
    pool = await create_pool(w.s.pg_dsn, 1, 1)
    try:
        await rn.wait_offsets(pool, w.s, last(sent), timeout=180)
    finally:
        await pool.close()
    first = await rn.first_prepare(w.c, w.thread)
    # The plans made while the tables were empty are kept until they are analyzed
    # (``benchmarks.agents``' ANALYZE after its warm-up): analyzed now, the first round's
    # agents run on the plans the second's do.
    await admin(w.s.pg_dsn, "ANALYZE")
    log(f"a thread of {first['record_count']} records, its view built")


async def ingest(w: World, n: int) -> float:
    """``n`` events over 50 new sessions (as ``benchmarks.run`` ingests), interleaved and
    sent at once; the processor's CPU (its offloaded child included) from the send until
    the last one is committed, µs per event."""

    async def one() -> Any:
        return await w.c.start_run(await w.c.open_session(ag.SPACE, "bench", w.bench_release))

    runs = await asyncio.gather(*(one() for _ in range(SESSIONS)))
    rounds = max(1, n // (SESSIONS * 5))
    per_run = [await rn._events_for(r, rounds, "g") for r in runs]
    stream = [evs[i] for i in range(rounds * 5) for evs in per_run]
    pool = await create_pool(w.s.pg_dsn, 1, 2)
    try:
        cpu0 = rn.cpu_seconds(w.services.processor)[1]
        t0 = time.perf_counter()
        await rn.wait_offsets(pool, w.s, last(await w.c.producer.send_many(stream)), timeout=180)
        took, cpu = time.perf_counter() - t0, rn.cpu_seconds(w.services.processor)[1] - cpu0
    finally:
        await pool.close()
    us = cpu / len(stream) * 1e6
    log(f"{len(stream)} events committed in {took:.1f} s; processor CPU {us:,.0f} µs per event")
    return us


async def prepare_times(w: World, calls: int) -> list[float]:
    """``calls`` prepares of the seeded thread, one at a time, after one that is not
    counted: the server's assemble times (ms). The first prepare after a pause (the
    other side's batch, a settle) meets caches the pause cooled: 8-12 ms against 2-3 ms
    warm, and with ten batches a round those first calls were most of a round's five
    slowest of 500, its p99. ``benchmarks.run`` times warm prepares, one after another."""
    run, server = w.thread, []
    body = {"purpose": "action", "instance_id": run.instance_id}
    path = f"/v1/sessions/{run.session_id}/runs/{run.run_id}/prepare"
    async with httpx.AsyncClient(base_url=w.url, timeout=60, headers=w.c.http.headers) as http:
        for i in range(calls + 1):
            r = await http.post(path, json=body)
            r.raise_for_status()
            if i:
                server.append(assemble_ms(r.content))
    return server


def assemble_ms(answer: bytes) -> float:
    """The answer's ``timing.assemble_ms``, read from its last bytes: parsing the whole
    answer at 10k records (~4 MB, ~20 ms) would double each call's time."""
    at = answer.rfind(b'"timing":')
    return float(orjson.loads(answer[at + 9 : answer.index(b"}", at) + 1])["assemble_ms"])


def prepare_row(server: list[float]) -> dict[str, Any]:
    return {
        "calls": len(server),
        "server_p50_ms": round(rn.pct(server, 50), 3),
        "server_p99_ms": round(rn.pct(server, 99), 3),
    }


async def probe(w: World, args: argparse.Namespace, prepares: bool = True) -> dict[str, Any]:
    """One round: agents, the ingest burst, the prepares (``prepares``: else the driver
    asks for them in batches)."""
    lv = ag.Level(args.agents, args.warmup, args.seconds)
    steps = await ag.level(w.c, w.agents_release, lv, w.services, w.s, w.db)
    log(ag.line(steps))
    out = {"agents": steps, "processor_cpu_us_per_event": round(await ingest(w, args.events), 1)}
    # ANALYZE the round's writes, as benchmarks.run does before it times prepares: a real
    # session of 10k records has been analyzed by autovacuum, while here when autovacuum
    # gets to a round's writes (its agents, its burst) is chance, and the plans with it.
    await admin(w.s.pg_dsn, "ANALYZE")
    if prepares:
        out["prepare"] = row = prepare_row(await prepare_times(w, args.prepare_calls))
        log(f"prepare at {args.records} records: server p50 {row['server_p50_ms']} ms,"
            f" p99 {row['server_p99_ms']} ms ({row['calls']} calls)")  # fmt: skip
    return out


async def fresh(w: World) -> float:
    """Prepare stopped and started again, and the thread's view built again by a first
    prepare (the prepares that follow are warm); the seconds it took."""
    t = time.monotonic()
    assert w.services.prepare is not None
    await asyncio.to_thread(w.services.prepare.stop)
    await asyncio.to_thread(w.services.prepare.start, START_TIMEOUT_S)
    await rn.first_prepare(w.c, w.thread)
    took = time.monotonic() - t
    log(f"Prepare started afresh, the thread's view built again, in {took:.1f} s")
    return took


async def serve(
    args: argparse.Namespace, services: ServiceSet, s: Settings, url: str, key: str, db: str
) -> list[dict[str, Any]]:
    """Seeded, one round; ``--driven``: what each line read from stdin asks, until its
    end — ``round``: agents and the burst, answered ``ROUND <json>``; ``fresh``: Prepare
    started again, answered ``FRESH <seconds>``; ``prep N``: N prepares, answered
    ``PREP <json list of assemble ms>``. ``benchmarks.compare --gate`` drives two of
    these, one per side, each with its services up throughout (Prepare started afresh
    before each round's prepares), and alternates the sides' prepares in small batches."""
    out: list[dict[str, Any]] = []
    async with ContextClient(s.kafka_bootstrap, url, s.topic_records, api_key=key) as c:
        w = World(c, services, s, url, db)
        await seed(w, args.records)
        if not args.driven:
            return [await probe(w, args)]
        print("READY", flush=True)
        while line := await asyncio.to_thread(sys.stdin.readline):
            if line.startswith("prep "):
                times = await prepare_times(w, int(line.split()[1]))
                print("PREP " + json.dumps(times), flush=True)
                continue
            if line.startswith("fresh"):
                print(f"FRESH {await fresh(w):.1f}", flush=True)
                continue
            t = time.monotonic()
            out.append(await probe(w, args, prepares=False))
            out[-1]["seconds"] = round(time.monotonic() - t, 1)
            print("ROUND " + json.dumps(out[-1]), flush=True)
    return out


def stop(services: ServiceSet) -> None:
    procs = [services.analytics, services.prepare, services.compaction, services.processor]
    with ThreadPoolExecutor(len(procs)) as pool:
        for done in [pool.submit(p.stop) for p in procs if p is not None]:
            done.result()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--events", type=int, default=5_000)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--prepare-calls", type=int, default=120)
    ap.add_argument("--driven", action="store_true", help="a round per stdin line (serve)")
    args = ap.parse_args()
    base = Settings()
    tag = uuid.uuid4().hex[:6]
    db = f"alc_gate_{tag}"
    asyncio.run(admin(base.pg_dsn, f'CREATE DATABASE "{db}"'))
    port = free_port()
    os.environ.update(scratch_env("gate", tag, base.pg_dsn))
    os.environ.update({
        "ALC_ANALYTICS_GROUP": f"alc-gate-analytics-{tag}",
        "ALC_PROCESSOR_INSTANCE_ID": f"gate-{tag}",
        "ALC_COMPACTION_INSTANCE_ID": f"gate-compaction-{tag}",
        "ALC_PREPARE_PORT": str(port),
    })  # fmt: skip
    s = Settings()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    services = service_set(env, OUT / f"logs-gate-{tag}", Path.cwd(), "127.0.0.1", port,
                           sys.executable)  # fmt: skip
    try:
        key = asyncio.run(provision(s, ag.SPACE))
        start(services)
        log(f"services up (database {db})")
        results = asyncio.run(serve(args, services, s, f"http://127.0.0.1:{port}", key, db))
    finally:
        stop(services)
        # Its database and topics (a development broker keeps paying for every topic
        # left). This file also runs on the baseline's code: ``drop_scratch`` is in every
        # commit a gate takes for its baseline since 4932ba7.
        drop_scratch(base.pg_dsn, db, s)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "gate_probe.json").write_text(json.dumps(results[-1] if results else {}, indent=2))
    log(f"{len(results)} rounds in {time.monotonic() - T0:.1f} s; wrote {OUT / 'gate_probe.json'}")
    sys.exit(1 if any(r["agents"]["errors"] for r in results) else 0)


if __name__ == "__main__":
    main()
