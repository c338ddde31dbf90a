"""``make bench``: end-to-end ingest throughput per processor driver (faust, aiokafka) and
prepare latency, beside this machine's raw ceilings (aiokafka producer alone, asyncpg COPY
alone, a no-op faust agent), measured in the same run.

Prints a table and writes ``build/bench/results.json``. Uses its own database, topics and
consumer group, against the stack ``deploy/stack.sh up`` started (or ``ALC_*`` settings).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from benchmarks.ceilings import copy_ceiling, noop_faust_rate, producer_ceiling
from devstack.launcher import Proc, service_set
from domain.auth import KeyKind
from schemas.contracts import ToolStatus
from schemas.settings import Settings
from schemas.wire import encode_event
from services.sdk.client import ApiError, ContextClient, RunHandle
from storage.api_keys import issue
from storage.migrate import apply_dsn
from storage.pool import create_pool
from streams.kafka.bus_secrets import issuer_secret
from streams.kafka.provision import ensure_bus

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "bench"
PROFILE = {
    "name": "bench-1m",
    "context_capacity": 1_000_000,
    "output_reserve": 8192,
    "safety_margin": 4096,
}


async def first_prepare(c: ContextClient, run: RunHandle) -> dict[str, Any]:
    """The first prepare of a view, retried while the backlog is still being committed
    (``not_committed_yet`` and other retriable answers): a slow machine is not a failure."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(lambda e: isinstance(e, ApiError) and e.retriable),
        stop=stop_after_delay(300),
        wait=wait_exponential(multiplier=0.5, max=5),
        reraise=True,
    ):
        with attempt:
            return await c.prepare(run)
    raise AssertionError("unreachable: tenacity reraises")


def log(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


async def _events_for(run: RunHandle, rounds: int, tag: str) -> list[Any]:
    from devstack.events import question_round  # the same builders the tests use

    out = []
    for r in range(rounds):
        out += question_round(run, f"{tag}{r}", (ToolStatus.OK, ToolStatus.ERROR))
    return out


async def wait_offsets(
    pool: asyncpg.Pool, s: Settings, want: dict[int, int], timeout: float = 600
) -> dict[int, int]:
    """Wait until every partition's tracking row passes ``want``; the rows at the end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = await committed_offsets(pool, s)
        if all(done.get(p, 0) > o for p, o in want.items()):
            return done
        await asyncio.sleep(0.02)
    raise TimeoutError("events not committed in time")


async def committed_offsets(pool: asyncpg.Pool, s: Settings) -> dict[int, int]:
    rows = await pool.fetch(
        "SELECT partition, next_offset FROM consumer_offsets WHERE consumer=$1 AND topic=$2",
        s.processor_id,
        s.topic_records,
    )
    return {r["partition"]: r["next_offset"] for r in rows}


def _stat(pid: int | str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all cores so far (Linux ``/proc/stat``)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return sum(ticks) - idle, sum(ticks)


def infra_seconds() -> float:
    """CPU time used so far by the broker (java) and PostgreSQL processes."""
    ticks = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                head, rest = (entry / "stat").read_text().rsplit(")", 1)
            except OSError:
                continue
            if head.split("(", 1)[1] in ("java", "postgres"):
                fields = rest.split()
                ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_seconds(proc: Proc) -> tuple[float, float]:
    """User + system CPU time used so far by the process, and by it and its live children
    (the faust driver's offloaded processor, ``streams.drivers.worker``), from Linux ``/proc``."""
    assert proc.popen is not None
    root = proc.popen.pid
    own = children = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat(entry.name)
        except OSError:  # gone meanwhile
            continue
        ticks = int(fields[11]) + int(fields[12])
        if int(entry.name) == root:
            own += ticks
        elif int(fields[1]) == root:  # fields[1]: the parent pid
            children += ticks
    tck = os.sysconf("SC_CLK_TCK")
    return own / tck, (own + children) / tck


async def drain_rate(
    s: Settings, pool: asyncpg.Pool, c: ContextClient, rel: str, processor: Proc, n_events: int
) -> tuple[float, float, float]:
    """Processor capacity alone: a backlog written while it is stopped, then drained
    with nothing else competing for the CPU. Timed from the first batch's commit to the
    last one's (start-up excluded, like the no-op faust agent's read rate). Returns the
    rate and the processor's CPU µs per event over the same span: on a shared machine
    whose speed varies, CPU per event moves less than the rate."""
    runs = []
    for _ in range(50):
        sess = await c.open_session("bench", "bench", rel)
        runs.append(await c.start_run(sess))
    rounds = max(1, n_events // (50 * 5))
    per_run = [await _events_for(r, rounds, "d") for r in runs]
    stream = [evs[i] for i in range(rounds * 5) for evs in per_run]
    processor.stop()
    before = await committed_offsets(pool, s)
    sent = await c.producer.send_many(stream)
    last: dict[int, int] = {}
    for p, o in sent:
        last[p] = max(last.get(p, -1), o)
    await asyncio.to_thread(processor.start)
    while (first := await committed_offsets(pool, s)) == before:
        await asyncio.sleep(0.005)
    t0, cpu0, busy0, infra0 = (
        time.perf_counter(),
        cpu_seconds(processor),
        machine_busy(),
        infra_seconds(),
    )
    first_batch = sum(o - before.get(p, 0) for p, o in first.items())
    await wait_offsets(pool, s, last)
    drained = max(len(stream) - first_batch, 1)
    cpu1, busy1, infra_us = cpu_seconds(processor), machine_busy(), infra_seconds()
    infra_us = (infra_us - infra0) / drained * 1e6
    own_us, cpu_us = ((b - a) / drained * 1e6 for a, b in zip(cpu0, cpu1, strict=True))
    took = time.perf_counter() - t0
    if cpu_us > own_us:
        log(
            f"  of which the driver's process {own_us:,.0f} µs per event"
            f" ({own_us * drained / took / 1e6:.0%} of a core), its processor child"
            f" {cpu_us - own_us:,.0f} µs ({(cpu_us - own_us) * drained / took / 1e6:.0%})"
        )
    log(
        f"  the machine's {os.cpu_count()} cores were"
        f" {(busy1[0] - busy0[0]) / max(busy1[1] - busy0[1], 1):.0%}"
        f" busy meanwhile; the broker and PostgreSQL used {infra_us:,.0f} µs per event"
    )
    return drained / took, cpu_us, infra_us


async def bench(
    s: Settings,
    url: str,
    events_total: int,
    prepare_sizes: list[int],
    prepare_calls: int,
    processor: Proc,
    driver: str,
) -> dict[str, Any]:
    """One driver's run: ingest end to end, the processor draining a backlog; with the
    first driver also the ceilings (and prepare latency when ``prepare_sizes``); with the
    faust driver the no-op faust agent's read rate of the same topic."""
    pool = await create_pool(s.pg_dsn, 1, 4)
    results: dict[str, Any] = {"machine": {"cores": os.cpu_count()}, "driver": driver}
    async with ContextClient(s.kafka_bootstrap, url, topic=s.topic_records) as c:
        rel = await c.register_release(
            agent_id="bench", instructions="Benchmark agent.", model_profile=PROFILE
        )
        # ── ingest ───────────────────────────────────────────────────────────────────
        n_sessions = 50
        runs = []
        for _ in range(n_sessions):
            sess = await c.open_session("bench", "bench", rel["release_id"])
            runs.append(await c.start_run(sess))
        rounds = max(1, events_total // (n_sessions * 5))
        stream: list[Any] = []
        per_run = [await _events_for(r, rounds, "i") for r in runs]
        for i in range(rounds * 5):  # interleave sessions like concurrent agents
            stream += [evs[i] for evs in per_run]
        payloads = [encode_event(e) for e in stream]
        keys = [e.scope.session_id.encode() for e in stream]
        log(f"ingest, {driver} driver: {len(stream)} events over {n_sessions} sessions")
        db_before = await pool.fetchval("SELECT pg_database_size(current_database())")
        t0, busy0 = time.perf_counter(), machine_busy()
        sent = await c.producer.send_many(stream)
        t_sent = time.perf_counter() - t0
        last: dict[int, int] = {}
        for p, o in sent:
            last[p] = max(last.get(p, -1), o)
        await wait_offsets(pool, s, last)
        e2e = len(stream) / (time.perf_counter() - t0)
        busy1 = machine_busy()  # every process: SDK, processor, broker, PostgreSQL
        e2e_cpu_us = (busy1[0] - busy0[0]) / os.sysconf("SC_CLK_TCK") / len(stream) * 1e6
        # Storage per event for the scaling model (docs/scaling.md): the whole database's
        # growth (records, indexes, tracking rows, counters), and the records table alone.
        db_bytes = await pool.fetchval("SELECT pg_database_size(current_database())") - db_before
        rec_bytes = await pool.fetchval(
            "SELECT pg_total_relation_size('records')::float8 / greatest(count(*), 1) FROM records"
        )
        log(
            f"  storage: {db_bytes / len(stream):,.0f} database bytes per event"
            f" ({rec_bytes:,.0f} bytes per row in records, indexes included)"
        )
        log(
            f"  end to end {e2e:,.0f} events/s"
            f" (SDK encode+send alone {len(stream) / t_sent:,.0f}/s);"
            f" the whole machine's CPU {e2e_cpu_us:,.0f} µs per event"
        )
        log("processor alone: drain a backlog written while it was stopped (after its first batch)")
        drain, cpu_us, infra_us = await drain_rate(
            s, pool, c, rel["release_id"], processor, len(stream)
        )
        log(f"  {drain:,.0f} events/s; processor CPU {cpu_us:,.0f} µs per event")
        ceilings: dict[str, Any] = {}
        if prepare_sizes:  # the first driver's run measures the machine's ceilings
            log("ceiling: aiokafka producer alone (pre-encoded, acks=all, idempotent)")
            ceilings["producer_ceiling_events_per_s"] = round(
                await producer_ceiling(s, payloads, keys)
            )
            log(f"  {ceilings['producer_ceiling_events_per_s']:,} events/s")
            log("the same producer through its batch API (as the SDK and the processor send)")
            ceilings["producer_batch_api_events_per_s"] = round(
                await producer_ceiling(s, payloads, keys, batch_api=True)
            )
            log(f"  {ceilings['producer_batch_api_events_per_s']:,} events/s")
            log("ceiling: asyncpg COPY alone (records rows, batches of 2000)")
            ceilings["copy_ceiling_rows_per_s"] = round(await copy_ceiling(pool, len(stream)))
            log(f"  {ceilings['copy_ceiling_rows_per_s']:,} rows/s")
        if driver == "faust":
            log("ceiling: a no-op faust agent reading the same records topic")
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            ceilings["noop_faust_events_per_s"] = round(
                await noop_faust_rate(s.topic_records, 2 * len(stream), env)
            )
            log(f"  {ceilings['noop_faust_events_per_s']:,} events/s")
        results["ingest"] = {
            **ceilings,
            "processor_drain_events_per_s": round(drain),
            "processor_cpu_us_per_event": round(cpu_us),
            "infra_cpu_us_per_event": round(infra_us),
            "e2e_machine_cpu_us_per_event": round(e2e_cpu_us),
            "events": len(stream),
            "sessions": n_sessions,
            "end_to_end_events_per_s": round(e2e),
            "db_bytes_per_event": round(db_bytes / len(stream)),
            "records_bytes_per_row": round(rec_bytes),
        }
        # ── prepare latency ──────────────────────────────────────────────────────────
        results["prepare"] = []
        async with httpx.AsyncClient(base_url=url, timeout=60, headers=c.http.headers) as http:
            for size in prepare_sizes:
                sess = await c.open_session("bench", "bench", rel["release_id"])
                run = await c.start_run(sess)
                evs = await _events_for(run, max(1, size // 5), f"p{size}-")
                await c.producer.send_many(evs[:size])
                first = await first_prepare(c, run)  # waits for commit; warms the view cache
                # A session of 10k records has lived long enough for autovacuum to have
                # analyzed its tables; these were written seconds ago. Without statistics
                # the planner reads every input of the session for the frontier's
                # constraints (1.6 ms a prepare instead of 0.1).
                await pool.execute("ANALYZE")
                server, client = [], []
                body = {"purpose": "action", "instance_id": run.instance_id}
                path = f"/v1/sessions/{run.session_id}/runs/{run.run_id}/prepare"
                for _ in range(prepare_calls):
                    t = time.perf_counter()
                    r = await http.post(path, json=body)
                    client.append((time.perf_counter() - t) * 1000)
                    server.append(r.json()["timing"]["assemble_ms"])
                row = {
                    "records": first["record_count"],
                    "messages": len(first["messages"]),
                    "server_p50_ms": round(pct(server, 50), 3),
                    "server_p99_ms": round(pct(server, 99), 3),
                    "client_p50_ms": round(pct(client, 50), 3),
                    "client_p99_ms": round(pct(client, 99), 3),
                    "calls": prepare_calls,
                }
                log(
                    f"prepare at {size} records: server p50 {row['server_p50_ms']} ms, p99 "
                    f"{row['server_p99_ms']} ms; client p50 {row['client_p50_ms']} ms, p99 "
                    f"{row['client_p99_ms']} ms"
                )
                results["prepare"].append(row)
    await pool.close()
    return results


def table(r: dict[str, Any]) -> str:
    i = r["ingest"]
    prod, copy, noop = (
        i.get("producer_ceiling_events_per_s", 0),
        i.get("copy_ceiling_rows_per_s", 0),
        i.get("noop_faust_events_per_s", 0),
    )
    lines = [
        "",
        "| measure | value | ceiling | ratio |",
        "|---|---:|---:|---:|",
        f"| ceiling: aiokafka producer alone (pre-encoded) | {prod:,} ev/s | | |",
        f"| the same producer, batch API | {i.get('producer_batch_api_events_per_s', 0):,} ev/s"
        " | | |",
        f"| ceiling: asyncpg COPY alone | {copy:,} rows/s | | |",
        f"| ceiling: no-op faust agent reading the records topic | {noop:,} ev/s | | |",
    ]
    for name, d in i["drivers"].items():
        lines += [
            f"| {name} driver: ingest end to end (SDK append → committed in PostgreSQL) | "
            f"{d['end_to_end_events_per_s']:,} ev/s | producer {prod:,} ev/s | "
            f"{d['ratio_to_producer']:.2f} |",
            f"| {name} driver: processor alone, draining a backlog | "
            f"{d['processor_drain_events_per_s']:,} ev/s | "
            + (f"no-op faust {noop:,} ev/s | {d['ratio_to_noop_faust']:.2f} |"
               if "ratio_to_noop_faust" in d else f"producer {prod:,} ev/s | "
               f"{d['ratio_drain_to_producer']:.2f} |"),
            f"| {name} driver: processor CPU per event while draining | "
            f"{d['processor_cpu_us_per_event']:,} µs | | |",
            f"| {name} driver: broker + PostgreSQL CPU per event while draining | "
            f"{d.get('infra_cpu_us_per_event') or 0:,} µs | | |",
            f"| {name} driver: the whole machine's CPU per event, end to end | "
            f"{d.get('e2e_machine_cpu_us_per_event') or 0:,} µs | "
            f"{2e6 / (0.5 * prod) if prod else 0:,.0f} µs budget at half the producer ceiling | |",
        ]  # fmt: skip
    lines.append(
        f"| PostgreSQL growth per ingested event (all tables and indexes) | "
        f"{i['db_bytes_per_event']:,} B | records row {i['records_bytes_per_row']:,} B | |"
    )
    lines += [
        "",
        "| records in thread | messages | server p50 ms | server p99 ms |"
        " client p50 ms | client p99 ms |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for p in r["prepare"]:
        lines.append(
            f"| {p['records']:,} | {p['messages']:,} | {p['server_p50_ms']} |"
            f" {p['server_p99_ms']} | {p['client_p50_ms']} | {p['client_p99_ms']} |"
        )
    return "\n".join(lines)


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One result of the drivers' runs: the ceilings (first run), each driver's rates with
    ratios, and the default (first) driver's numbers at the top level as before."""
    first = runs[0]
    ingest = {**first["ingest"]}
    for r in runs[1:]:
        ingest.update(
            {k: v for k, v in r["ingest"].items() if "ceiling" in k or k.startswith("noop_")}
        )
    prod = ingest.get("producer_ceiling_events_per_s") or 1
    noop = ingest.get("noop_faust_events_per_s")
    drivers: dict[str, Any] = {}
    for r in runs:
        d = r["ingest"]
        row = {
            "end_to_end_events_per_s": d["end_to_end_events_per_s"],
            "processor_drain_events_per_s": d["processor_drain_events_per_s"],
            "processor_cpu_us_per_event": d.get("processor_cpu_us_per_event"),
            "infra_cpu_us_per_event": d.get("infra_cpu_us_per_event"),
            "e2e_machine_cpu_us_per_event": d.get("e2e_machine_cpu_us_per_event"),
            "ratio_to_producer": round(d["end_to_end_events_per_s"] / prod, 3),
            "ratio_drain_to_producer": round(d["processor_drain_events_per_s"] / prod, 3),
        }
        if r["driver"] == "faust" and noop:
            row["ratio_to_noop_faust"] = round(d["processor_drain_events_per_s"] / noop, 3)
        drivers[r["driver"]] = row
    ingest["drivers"] = drivers
    ingest["ratio_to_producer"] = drivers[first["driver"]]["ratio_to_producer"]
    ingest["targets"] = {"aiokafka_e2e_to_producer": 0.5, "faust_drain_to_noop_faust": 0.8}
    return {"machine": first["machine"], "ingest": ingest, "prepare": first["prepare"]}


def run_driver(base: Settings, driver: str, args: argparse.Namespace, first: bool) -> Any:
    """A fresh database, topics and group for ``driver``; its services; its run."""
    tag = uuid.uuid4().hex[:6]
    db = f"alc_bench_{tag}"

    async def create_db() -> None:
        conn = await asyncpg.connect(base.pg_dsn)
        await conn.execute(f'CREATE DATABASE "{db}"')
        await conn.close()

    asyncio.run(create_db())
    os.environ.update(
        {
            "ALC_PG_DSN": base.pg_dsn.rsplit("/", 1)[0] + "/" + db,
            "ALC_TOPIC_RECORDS": f"bench{tag}.records",
            "ALC_TOPIC_COMMITTED": f"bench{tag}.committed",
            "ALC_TOPIC_DEAD_LETTER": f"bench{tag}.deadletter",
            "ALC_PROCESSOR_ID": f"alc-bench-{tag}",
            "ALC_PROCESSOR_INSTANCE_ID": f"bench-{tag}",
            "ALC_PROCESSOR_DRIVER": driver,
            "ALC_PREPARE_PORT": str(base.prepare_port + 7),
            "ALC_LOG_LEVEL": "WARNING",
        }
    )
    s = Settings()
    asyncio.run(apply_dsn(s.pg_dsn))
    # The runtime's credential (R15.4): a host key of the "bench" space, read by the SDK.
    os.environ["ALC_API_KEY"] = asyncio.run(
        issue(s.pg_dsn, "bench", KeyKind.HOST, issuer=issuer_secret(s))
    ).key
    asyncio.run(ensure_bus(s))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "ALC_LOG_LEVEL": "INFO"}
    procs = service_set(env, OUT / f"logs-{tag}", REPO, "127.0.0.1", s.prepare_port, sys.executable)
    sizes = [int(x) for x in args.prepare_sizes.split(",")] if first else []
    try:
        procs.prepare.start()
        procs.processor.start()
        url = f"http://127.0.0.1:{s.prepare_port}"
        return asyncio.run(
            bench(s, url, args.events, sizes, args.prepare_calls, procs.processor, driver)
        )
    finally:
        procs.prepare.stop()
        procs.processor.stop()
        # Its numbers are in results.json: the scratch database (~200 MB) goes (the
        # regression gate runs this four times).
        asyncio.run(drop_db(base.pg_dsn, db))


async def drop_db(dsn: str, db: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    finally:
        await conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--prepare-sizes", default="100,1000,10000")
    ap.add_argument("--prepare-calls", type=int, default=200)
    ap.add_argument("--drivers", default="faust,aiokafka", help="processor drivers to run")
    args = ap.parse_args()
    base = Settings()
    runs = [
        run_driver(base, d, args, first=(n == 0)) for n, d in enumerate(args.drivers.split(","))
    ]
    results = merge(runs)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=2))
    print(table(results))
    print(f"\n[bench] wrote {OUT / 'results.json'}")


if __name__ == "__main__":
    main()
