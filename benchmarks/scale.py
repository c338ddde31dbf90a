"""``python -m benchmarks.scale`` (``make test-scale``): the scale test on a replicated
cluster (issue 13, item 4).

Starts the 3-node KRaft cluster (``deploy/kafka.sh --brokers 3 up``; replication factor
3, ``min.insync.replicas=2``, producers ``acks=all``) and stops it at the end; runs
every process scaled out on it, each its own OS process: 3 session processors (one
consumer group, each its own ``ALC_PROCESSOR_INSTANCE_ID``), 2 Prepare instances (own
ports) and 2 compaction workers (one group). The soak's load (``benchmarks.soak_load``)
drives many sessions spread over both Prepare instances (``benchmarks.scale_balance``:
a session fails over to the other instance while its own is unreachable; a
``prepared_not_found`` on the model call after a fail-over is answered by preparing
again), and under that load one broker, one processor and one Prepare instance are
killed with ``kill -9`` and started again (``benchmarks.soak_chaos``).

Afterwards the soak's checks (``benchmarks.soak_check``): no acknowledged event lost or
duplicated, sequences gap-free, counters equal a recount, no summarizer call repeated;
and every Prepare instance answered prepares. Prints a table, writes
``build/scale/scale.json`` and exits 1 on any failure.

Uses the PostgreSQL of ``ALC_PG_DSN`` (default: the ``deploy/stack.sh`` one) with a
database of its own (``alc_scale_<tag>``, dropped unless ``--keep-db``) and topics and
groups of its own; never touches the single broker or PostgreSQL itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.scale_balance import FailoverTransport, Tally
from benchmarks.soak import admin, drive, provision, scratch_env, table, verdict
from benchmarks.soak_chaos import Chaos
from benchmarks.soak_load import Ledger, LoadConfig
from devstack.launcher import Proc, service_set
from devstack.ports import free_port
from schemas.settings import Settings

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "scale"
SPACE = "scale"
HOST = "127.0.0.1"
BROKERS = 3
PARTITIONS = 6  # two per processor
START_TIMEOUT_S = 240.0


def log(msg: str) -> None:
    print(f"[scale] {msg}", flush=True)


def cluster(cmd: str) -> None:
    """``deploy/kafka.sh --brokers 3 <cmd>``: the cluster only, never PostgreSQL."""
    t0 = time.monotonic()
    script = REPO / "deploy" / "kafka.sh"
    done = subprocess.run(
        ["bash", str(script), "--brokers", str(BROKERS), cmd],
        capture_output=True,
        text=True,
        env=cluster_env(),
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"kafka.sh --brokers {BROKERS} {cmd} failed:\n{done.stdout}{done.stderr}"
        )
    log(f"cluster {cmd} in {time.monotonic() - t0:.0f} s")


def cluster_env() -> dict[str, str]:
    # Three JVMs starting at once on 2 busy cores can take minutes to answer (kafka.sh
    # waits 60 s per node by default); a slow start is not what this test is about.
    return {"ALC_KAFKA_START_TIMEOUT": "240", **os.environ, "ALC_KAFKA_BROKERS": str(BROKERS)}


def cluster_bootstrap() -> str:
    base = int(os.environ.get("ALC_KAFKA_CLUSTER_PORT", "29092"))
    return ",".join(f"{HOST}:{base + i}" for i in range(BROKERS))


def processes(env: dict[str, str], tag: str, logs: Path, ports: list[int]) -> dict[str, Proc]:
    """3 processors, 2 Prepare instances, 2 compaction workers: ``processor-1``..."""
    procs: dict[str, Proc] = {}
    for i in range(1, 4):
        port = ports[i - 1] if i <= len(ports) else 0
        own = {"ALC_PREPARE_PORT": str(port), "ALC_PROCESSOR_INSTANCE_ID": f"scale-{tag}-{i}"}
        ss = service_set({**env, **own}, logs, REPO, HOST, port, sys.executable, f"-{i}")
        chosen = [ss.processor] + ([ss.prepare, ss.compaction] if i <= len(ports) else [])
        procs.update({p.name: p for p in chosen})
    return procs


async def start_all(procs: dict[str, Proc]) -> None:
    """All at once, each waited for; a failure raises. Seven Python processes importing
    faust, FastAPI... on 2 shared cores: more than ``Proc.start``'s default 90 s is
    possible, and a slow start is not what this test is about."""
    await asyncio.gather(*(asyncio.to_thread(p.start, START_TIMEOUT_S) for p in procs.values()))


async def stop_all(procs: dict[str, Proc]) -> None:
    await asyncio.gather(*(asyncio.to_thread(p.stop) for p in procs.values()))


async def scale(
    args: argparse.Namespace, s: Settings, procs: dict[str, Proc], ports: list[int], key: str
) -> dict[str, Any]:
    backends = {f"prepare-{i}": f"{HOST}:{p}" for i, p in enumerate(ports, 1)}
    tally = Tally(list(backends))
    chaos = Chaos(
        procs, REPO, cluster_env(), Ledger(), time.monotonic(), log, start_timeout_s=START_TIMEOUT_S
    )
    cfg = LoadConfig(
        s.kafka_bootstrap, f"http://{HOST}:{ports[0]}", s.topic_records, key, SPACE,
        args.sessions, args.give_up, args.think, args.seed, model_calls=True,
        http_transport=lambda i: FailoverTransport(backends, i, tally),
    )  # fmt: skip
    targets = [f"kafka-node-{args.kill_node}", "processor-2", "prepare-1"]
    # The first fault once every session is past its start (12 producers and 7 processes
    # joining their groups on 2 cores); the last early enough to recover under load.
    window = (min(20.0, args.seconds * 0.2), args.seconds * 0.7)
    logs = next(iter(procs.values())).log_dir
    r = await drive(args, s, chaos, cfg, (targets, window), logs)
    return r | {
        "prepare_instances": tally.row(),
        "failed_over_requests": tally.failovers,
        "model_calls": chaos.ledger.model_calls,
        "reprepared_after_not_found": chaos.ledger.reprepared,
    }


def scale_checks(r: dict[str, Any]) -> dict[str, bool]:
    per = r["prepare_instances"].values()
    return verdict(r) | {
        "every Prepare instance answered prepares": all(v["prepares"] > 0 for v in per),
        "every prepare answered by one of them": sum(v["prepares"] for v in per) >= r["prepares"],
        # Each prepare was checked by the gateway, or was followed by a prepare again.
        "prepares checked by the gateway or redone":
            r["model_calls"] + r["reprepared_after_not_found"] == r["prepares"],
    }  # fmt: skip


def scale_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    per = r["prepare_instances"]
    names = " / ".join(per)
    return [
        ("cluster", f"{BROKERS} brokers, replication 3, min.insync.replicas 2,"
                    f" {PARTITIONS} partitions"),
        ("processes", "3 processors, 2 Prepare instances, 2 compaction workers"),
        (f"prepares answered by {names}", " / ".join(str(v["prepares"]) for v in per.values())),
        (f"model calls checked by {names}",
         " / ".join(str(v["model_calls"]) for v in per.values())),
        ("requests failed over to the other Prepare", str(r["failed_over_requests"])),
        ("prepared_not_found after fail-over: prepared again",
         str(r["reprepared_after_not_found"])),
        ("whole test (cluster up .. down)", f"{r['total_seconds']} s"),
    ]  # fmt: skip


def run(args: argparse.Namespace, base: Settings, tag: str) -> dict[str, Any]:
    """In the run's own database and topics on the cluster: provision, start, load."""
    os.environ.update(scratch_env(SPACE, tag, base.pg_dsn))
    os.environ.update({
        "ALC_KAFKA_BOOTSTRAP": cluster_bootstrap(),
        "ALC_TOPIC_REPLICATION": str(BROKERS),
        "ALC_TOPIC_PARTITIONS": str(PARTITIONS),
        "PYTHONUNBUFFERED": "1",
    })  # fmt: skip
    s = Settings()
    ports = [free_port(), free_port()]
    logs = OUT / f"logs-{tag}"
    procs = processes(dict(os.environ), tag, logs, ports)
    log(f"topics {SPACE}{tag}.* (RF {BROKERS}), {args.sessions} sessions,"
        f" {args.seconds:.0f} s; processes {', '.join(procs)}; logs in {logs}")  # fmt: skip
    try:
        key = asyncio.run(provision(s, SPACE))
        t0 = time.monotonic()
        asyncio.run(start_all(procs))
        log(f"7 processes ready in {time.monotonic() - t0:.0f} s")
        result = asyncio.run(scale(args, s, procs, ports, key))
    finally:
        asyncio.run(stop_all(procs))
    return result | {"logs": str(logs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=100.0, help="load time (s)")
    ap.add_argument("--sessions", type=int, default=12)
    ap.add_argument("--kill-node", type=int, default=1, choices=range(1, BROKERS + 1))
    ap.add_argument("--think", type=float, default=0.2, help="mean pause after a prepare (s)")
    ap.add_argument("--give-up", type=float, default=120.0, help="retry one call this long")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--keep-db", action="store_true")
    ap.add_argument("--keep-cluster", action="store_true", help="leave the cluster running")
    args = ap.parse_args()
    # Refused connections to the killed broker are the fault we inject, not news.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    t0 = time.monotonic()
    base = Settings()
    tag = uuid.uuid4().hex[:6]
    db = f"alc_{SPACE}_{tag}"
    asyncio.run(admin(base.pg_dsn, f'CREATE DATABASE "{db}"'))  # PostgreSQL is there
    log(f"database {db} on {base.pg_dsn.rsplit('/', 1)[0]}")
    try:
        cluster("up")
        result = run(args, base, tag)
    finally:
        if not args.keep_cluster:
            cluster("down")
        if not args.keep_db:
            asyncio.run(admin(base.pg_dsn, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    result["total_seconds"] = round(time.monotonic() - t0, 1)
    result["verdict"] = scale_checks(result)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "scale.json").write_text(json.dumps(result, indent=2))
    print(table(result, scale_rows(result), result["verdict"]))
    print(f"\n[scale] wrote {OUT / 'scale.json'}")
    sys.exit(0 if all(result["verdict"].values()) else 1)


if __name__ == "__main__":
    main()
