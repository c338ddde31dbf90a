"""``python -m benchmarks.soak`` (``make soak``): our own reliability suite.

Steady load from many sessions through the real services — the session processor
(``python -m streams``), the compaction service and Prepare, each its own OS process —
while faults are injected: every service is killed with ``kill -9`` several times (and
restarted at once), Kafka and PostgreSQL are restarted once each (``deploy/kafka.sh`` /
``deploy/postgres.sh`` down + up). The load rides it out by retrying with backoff;
retries are safe because every call is idempotent. Afterwards, once the processor caught
up, every acknowledged append (and run start / finish) must be exactly one committed
record, no record may exist that was never sent, sequences have no gaps, the sessions'
counters match the records and no compaction job called its summarizer twice (R15.3).

Prints a table (with the recovery time after each fault), writes ``build/soak/soak.json``
and exits 1 on any loss, duplication, gap, drift, repeated model call, session stopped by
an error, or a fault the load did not recover from.

It RESTARTS the Kafka and PostgreSQL of the ``deploy/stack.sh`` stack it runs on (the one
``ALC_STATE_DIR`` / ``ALC_KAFKA_PORT`` / ``ALC_PG_PORT`` name): run it on a stack of its
own when others use the default one. Its data goes to its own database
(``alc_soak_<tag>``, dropped unless ``--keep-db``), topics and consumer groups.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg

from benchmarks.soak_chaos import Chaos, plan
from benchmarks.soak_check import check_compaction, check_records, next_summary_after
from benchmarks.soak_db import compaction_log_lines, fetch, wait_caught_up
from benchmarks.soak_load import Ledger, LoadConfig, run_load
from devstack.launcher import ServiceSet, service_set
from devstack.ports import free_port
from domain.auth import KeyKind
from schemas.settings import Settings
from storage.api_keys import issue
from storage.migrate import apply_dsn
from streams.kafka.bus_secrets import issuer_secret
from streams.kafka.provision import drop_topics, ensure_bus

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "soak"
SPACE = "soak"


def log(msg: str) -> None:
    print(f"[soak] {msg}", flush=True)


def use_stack_env() -> None:
    """Connect to the stack ``deploy/stack.sh`` runs in ``ALC_STATE_DIR`` — the one whose
    Kafka and PostgreSQL this soak restarts — and refuse any other."""
    state = Path(os.environ.get("ALC_STATE_DIR") or REPO / ".state")
    env_file = state / "stack.env"
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            k, _, v = line.partition("=")
            if k and v:
                os.environ.setdefault(k, v)
    s = Settings()
    kafka = f"127.0.0.1:{os.environ.get('ALC_KAFKA_PORT', '19092')}"
    pg = f"@127.0.0.1:{os.environ.get('ALC_PG_PORT', '55432')}/"
    if s.kafka_bootstrap != kafka or pg not in s.pg_dsn:
        sys.exit(
            f"[soak] ALC_KAFKA_BOOTSTRAP/ALC_PG_DSN ({s.kafka_bootstrap}, {s.pg_dsn}) are not"
            f" the deploy/stack.sh stack this soak would restart ({kafka}, {pg}): set"
            " ALC_KAFKA_PORT / ALC_PG_PORT / ALC_STATE_DIR instead"
        )
    status = subprocess.run(
        ["bash", str(REPO / "deploy" / "stack.sh"), "status"], capture_output=True, text=True
    )
    if status.returncode != 0:
        sys.exit(f"[soak] the stack is not running (make up):\n{status.stdout}{status.stderr}")


async def admin(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def scratch_env(kind: str, tag: str, dsn: str) -> dict[str, str]:
    """A database (``alc_<kind>_<tag>``, to create) and topics and groups of a run's own."""
    db = f"alc_{kind}_{tag}"
    return {
        "ALC_PG_DSN": dsn.rsplit("/", 1)[0] + "/" + db,
        "ALC_TOPIC_RECORDS": f"{kind}{tag}.records",
        "ALC_TOPIC_COMMITTED": f"{kind}{tag}.committed",
        "ALC_TOPIC_DEAD_LETTER": f"{kind}{tag}.deadletter",
        "ALC_TOPIC_COMPACTION_REQUESTS": f"{kind}{tag}.compaction.requests",
        "ALC_TOPIC_OBSERVABILITY": f"{kind}{tag}.observability",
        "ALC_COMPACTION_GROUP": f"alc-{kind}-compaction-{tag}",
        "ALC_PROCESSOR_ID": f"alc-{kind}-{tag}",
        "ALC_LOG_LEVEL": "INFO",  # the compaction log lines are the R15.3 evidence
    }


def drop_scratch(base_dsn: str, db: str, s: Settings) -> None:
    """A run's database and topics (``scratch_env``) removed at its end: a broker keeps
    paying for every partition it holds, and thousands of runs' topics slowed later runs."""
    asyncio.run(admin(base_dsn, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    try:
        asyncio.run(drop_topics(s))
    except Exception as exc:  # e.g. the broker a failed run left down: said, not raised
        log(f"the topics of {db} were not deleted: {exc!r}")


async def provision(s: Settings, space: str) -> str:
    """Schema, topics and a host key of ``space`` (the runtime's credential, README
    "Authentication") in the run's own database."""
    await apply_dsn(s.pg_dsn)
    await ensure_bus(s)
    return (await issue(s.pg_dsn, space, KeyKind.HOST, label=space, issuer=issuer_secret(s))).key


async def progress(
    ledger: Ledger, t0: float, stop: asyncio.Event, say: Callable[[str], None] = log
) -> None:
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 15)
            return
        say(
            f"  {time.monotonic() - t0:.0f} s: {ledger.questions} questions,"
            f" {ledger.appends} appends, {ledger.prepares} prepares, {ledger.acked_count()}"
            f" acknowledged, retries {dict(ledger.retries)}"
        )


async def soak(
    args: argparse.Namespace, s: Settings, services: ServiceSet, url: str, key: str
) -> dict[str, Any]:
    chaos = Chaos(services, REPO, dict(os.environ), Ledger(), time.monotonic(), log)
    cfg = LoadConfig(
        s.kafka_bootstrap, url, s.topic_records, key, SPACE, args.sessions, args.give_up,
        args.think, args.seed,
    )  # fmt: skip
    targets = args.faults.split(",") if args.faults else plan(args.kills)
    window = (min(15.0, args.seconds * 0.1), args.seconds * 0.85)
    return await drive(args, s, chaos, cfg, (targets, window), services.compaction.log_dir)


async def drive(
    args: argparse.Namespace,
    s: Settings,
    chaos: Chaos,
    cfg: LoadConfig,
    faults: tuple[list[str], tuple[float, float]],
    logs: Path,
) -> dict[str, Any]:
    """Load for ``args.seconds`` with ``faults`` (targets, spread over a window of seconds
    after the start) injected, then the checks' inputs."""
    ledger, t0 = chaos.ledger, chaos.t0
    stop_load, stop_aux = asyncio.Event(), asyncio.Event()
    load = asyncio.create_task(run_load(cfg, ledger, stop_load))
    aux = [
        asyncio.create_task(chaos.supervise(stop_aux)),
        asyncio.create_task(progress(ledger, t0, stop_aux, chaos.log)),
    ]
    await chaos.run(*faults)
    await asyncio.sleep(max(0.0, t0 + args.seconds - time.monotonic()))
    chaos.log(f"load stops at {time.monotonic() - t0:.0f} s; sessions finish their question")
    stop_load.set()
    await load
    load_s = time.monotonic() - t0
    stop_aux.set()
    await asyncio.gather(*aux, return_exceptions=True)
    caught_up = await wait_caught_up(
        s.kafka_bootstrap, s.topic_records, s.topic_partitions, s.pg_dsn, s.processor_id, 120.0
    )
    chaos.log(f"processor caught up in {caught_up} s" if caught_up is not None else "NOT caught up")
    rows = await fetch(s.pg_dsn, [f"{cfg.space}-s{i:03d}" for i in range(args.sessions)])
    for f in chaos.faults:
        f.next_summary_s = next_summary_after(rows["jobs"], f.wall, f.down_s)
    return {
        "config": {k: v for k, v in vars(args).items() if k != "keep_db"},
        "load_seconds": round(load_s, 1),
        "questions": ledger.questions,
        "appends": ledger.appends,
        "prepares": ledger.prepares,
        "question_misses": ledger.question_misses,
        "retries": dict(ledger.retries),
        "errors": ledger.errors,
        "caught_up_s": caught_up,
        **check_records(rows, ledger.attempted, ledger.acked),
        "compaction": check_compaction(rows["jobs"], compaction_log_lines(logs)),
        "faults": [f.row() for f in chaos.faults],
        "unexpected_exits": chaos.unexpected_exits,
    }


def verdict(r: dict[str, Any]) -> dict[str, bool]:
    return {
        "no acknowledged event lost": r["lost"] == 0,
        "no duplicate": r["duplicated"] == 0,
        "no record that was never sent": r["never_sent"] == 0,
        "no sequence gap": r["sequence_gaps"] == 0,
        "no counter drift": r["counter_drift"] == 0,
        # None: the compaction logs showed no work at all, so there is no evidence.
        "no model call repeated (R15.3)": r["compaction"]["model_calls_repeated"] == 0,
        "no session stopped by an error": not r["errors"],
        "processor caught up": r["caught_up_s"] is not None,
        "load recovered after every fault": all(f["recovered_s"] is not None for f in r["faults"]),
    }


def table(
    r: dict[str, Any],
    extra: list[tuple[str, str]] | None = None,
    checks: dict[str, bool] | None = None,
) -> str:
    """``extra`` rows go before the faults; ``checks`` replace ``verdict(r)``."""
    c = r["compaction"]
    rows = [
        ("load: sessions / questions / wall time",
         f"{r['config']['sessions']} / {r['questions']} / {r['load_seconds']} s"),
        ("appends / prepares", f"{r['appends']} / {r['prepares']}"),
        ("acknowledged events (appends + run start/finish)", str(r["acknowledged"])),
        ("lost", str(r["lost"])),
        ("duplicated", str(r["duplicated"])),
        ("records never sent", str(r["never_sent"])),
        ("sequence gaps", str(r["sequence_gaps"])),
        ("counter drift (sessions)", str(r["counter_drift"])),
        ("model calls repeated (R15.3)", str(c["model_calls_repeated"])),
        ("compaction jobs", f"{c['jobs']} {c['jobs_by_status']}"),
        ("summarizer calls saved / logged, republished",
         f"{c['summarizer_calls_saved']} / {c['summarizer_calls_logged']},"
         f" {c['republished_from_saved']}"),
        ("sent, not acknowledged (given up)", str(r["sent_not_acknowledged"])),
        ("refused / dead-lettered", str(r["refused_or_dead_lettered"] or 0)),
        ("question missing from a prepare", str(r["question_misses"])),
        ("retried calls, by error", str(r["retries"] or 0)),
        ("sessions stopped by an error", str(len(r["errors"]))),
        ("services exiting on their own", str(len(r["unexpected_exits"]))),
        ("processor caught up after the load", f"{r['caught_up_s']} s"),
        *(extra or []),
    ]  # fmt: skip
    w = max(len(a) for a, _ in rows)
    lines = [f"{a:<{w}}  {b}" for a, b in rows]
    lines += [
        "",
        f"{'#':>2}  {'fault':<20} {'at':>7} {'back after':>11} {'append+prepare ok':>18}"
        f" {'next summary':>13}",
    ]
    for i, f in enumerate(r["faults"], 1):
        rec = f"{f['recovered_s']} s" if f["recovered_s"] is not None else "NOT"
        nxt = f"{f['next_summary_s']} s" if f["next_summary_s"] is not None else "-"
        lines.append(
            f"{i:>2}  {f['action'] + ' ' + f['target']:<20} {f['at_s']:>5} s"
            f" {f['down_s']:>9} s {rec:>18} {nxt:>13}"
        )
    lines.append("")
    checks = verdict(r) if checks is None else checks
    lines += [f"{'check: ' + k:<{w}}  {'ok' if ok else 'FAILED'}" for k, ok in checks.items()]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 300)))
    ap.add_argument("--sessions", type=int, default=12)
    ap.add_argument("--kills", type=int, default=3, help="kill -9 rounds (each service once)")
    ap.add_argument("--faults", help="instead of the plan: e.g. prepare,kafka (debugging)")
    ap.add_argument("--think", type=float, default=0.2, help="mean pause after a prepare (s)")
    ap.add_argument("--give-up", type=float, default=180.0, help="retry one call this long")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--keep-db", action="store_true")
    args = ap.parse_args()
    use_stack_env()
    # The load's producers log every refused connection while Kafka is away: that is
    # the fault we inject, counted in the table, not news.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    base = Settings()
    tag = uuid.uuid4().hex[:6]
    db = f"alc_soak_{tag}"
    asyncio.run(admin(base.pg_dsn, f'CREATE DATABASE "{db}"'))
    port = free_port()
    os.environ.update(scratch_env("soak", tag, base.pg_dsn))
    os.environ.update({"ALC_PROCESSOR_INSTANCE_ID": f"soak-{tag}", "ALC_PREPARE_PORT": str(port)})
    s = Settings()
    logs = OUT / f"logs-{tag}"
    log(
        f"database {db}, topics soak{tag}.*, {args.sessions} sessions, {args.seconds:.0f} s,"
        f" {args.kills} kills per service, Kafka {s.kafka_bootstrap}; logs in {logs}"
    )
    services = service_set(
        {**os.environ, "PYTHONUNBUFFERED": "1"}, logs, REPO, "127.0.0.1", port, sys.executable
    )
    try:
        key = asyncio.run(provision(s, SPACE))
        services.start()
        result = asyncio.run(soak(args, s, services, f"http://127.0.0.1:{port}", key))
    finally:
        services.stop()
        if not args.keep_db:
            drop_scratch(base.pg_dsn, db, s)
    result["logs"] = str(logs)
    result["verdict"] = verdict(result)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "soak.json").write_text(json.dumps(result, indent=2))
    print(table(result))
    print(f"\n[soak] wrote {OUT / 'soak.json'}")
    sys.exit(0 if all(result["verdict"].values()) else 1)


if __name__ == "__main__":
    main()
