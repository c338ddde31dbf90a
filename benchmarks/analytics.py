"""``make bench`` row (issue 12): analytics throughput — observability events per second
consumed and rolled up into PostgreSQL by the analytics group's own batch handler —
beside the producer ceiling (the same events written by an aiokafka producer alone,
acks=all) measured in the same run.

Then the core's prepare p99 with and without the analytics group running, beside each
other (``benchmarks/analytics_prepare.py``; target ratio <= 1.1).

Its own database, topics and consumer group. Prints a table and writes
``build/bench/analytics.json`` (stable keys: ``analytics_per_s``,
``producer_ceiling_per_s``, ``prepare_p99_ms_without_analytics``,
``prepare_p99_ms_with_analytics``, ``prepare_p99_ratio``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
from aiokafka import AIOKafkaProducer

from benchmarks.analytics_prepare import prepare_p99
from schemas.settings import Settings
from schemas.wire import ObservabilityEvent, encode_observability
from services.analytics.__main__ import consumer_of
from services.analytics.pipeline import Pipeline
from storage.migrate import apply_dsn
from storage.pool import create_pool
from streams.kafka.auth import kafka_auth
from streams.kafka.provision import ensure_bus

OUT = Path(__file__).resolve().parents[1] / "build" / "bench"
ITEMS = ("instructions", "tools", "history", "summary", "material", "envelope")


def _events(n: int, now_ms: int) -> list[ObservabilityEvent]:
    """Prepares of 200 sessions over the last two hours (so ~120 1m windows are hit)."""
    rnd = random.Random(12)
    out = []
    for i in range(n):
        items = {k: rnd.randint(10, 40_000) for k in ITEMS}
        out.append(
            ObservabilityEvent(
                "prepare_budget", f"bench-s{i % 200}", "r", "i",
                now_ms - rnd.randint(0, 2 * 3_600_000), "p", purpose="action",
                budget_items=items, estimated_input=sum(items.values()),
            )
        )  # fmt: skip
    return out


async def _produce(s: Settings, topic: str, payloads: list[bytes]) -> float:
    p = AIOKafkaProducer(
        bootstrap_servers=s.kafka_bootstrap, acks="all", enable_idempotence=True,
        **kafka_auth(s, "admin").client_kwargs(),
        linger_ms=2, max_batch_size=1 << 20,
    )  # fmt: skip
    await p.start()
    try:
        t0 = time.perf_counter()
        futs = [await p.send(topic, v, key=f"k{i % 200}".encode()) for i, v in enumerate(payloads)]
        await asyncio.gather(*futs)
        return len(payloads) / (time.perf_counter() - t0)
    finally:
        await p.stop()


async def _consume(s: Settings, n: int) -> float:
    """Events/s from the first fetch until all ``n`` are applied (the service's own loop)."""
    pool = await create_pool(s.pg_dsn, 1, 2)
    consumer = consumer_of(s)
    await consumer.start()
    stop, done = asyncio.Event(), [0]

    def written(count: int) -> None:
        done[0] += count
        if done[0] >= n:
            stop.set()

    pipeline = Pipeline(s, pool, consumer, on_written=written)
    try:
        await pipeline.run(stop)
        assert pipeline.started is not None
        return n / (time.perf_counter() - pipeline.started)
    finally:
        await consumer.stop()
        await pool.close()


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    base = Settings()
    tag = uuid.uuid4().hex[:6]
    db = f"alc_bench_analytics_{tag}"
    conn = await asyncpg.connect(base.pg_dsn)
    await conn.execute(f'CREATE DATABASE "{db}"')
    await conn.close()
    s = replace_settings(base, db, tag)
    await apply_dsn(s.pg_dsn)
    await ensure_bus(s, [s.topic_observability, s.topic_dead_letter])
    n = args.events
    payloads = [encode_observability(e) for e in _events(n, int(time.time() * 1000))]
    try:
        ceiling = await _produce(s, s.topic_observability, payloads)
        rate = await _consume(s, n)
        out: dict[str, Any] = {
            "events": n,
            "producer_ceiling_per_s": round(ceiling),
            "analytics_per_s": round(rate),
        }
        if args.prepare_calls > 0:
            out |= await prepare_p99(s, tag, args.prepare_calls, args.records, args.obs_rate)
    finally:
        conn = await asyncpg.connect(base.pg_dsn)
        await conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        await conn.close()
    return out


def replace_settings(base: Settings, db: str, tag: str) -> Settings:
    return base.model_copy(
        update={
            "pg_dsn": base.pg_dsn.rsplit("/", 1)[0] + "/" + db,
            "topic_observability": f"bench{tag}.observability",
            "topic_dead_letter": f"bench{tag}.deadletter",
            "analytics_group": f"alc-bench-analytics-{tag}",
        }
    )


def table(r: dict[str, Any]) -> str:
    lines = [
        "| measure | value | beside | |",
        "|---|---:|---|---|",
        f"| analytics rollups (events/s consumed + rolled up) | {r['analytics_per_s']:,} |"
        f" producer ceiling {r['producer_ceiling_per_s']:,}/s"
        f" ({r['analytics_per_s'] / r['producer_ceiling_per_s']:.0%}) | {r['events']:,} events |",
    ]
    if "prepare_p99_ratio" in r:
        lines.append(
            f"| prepare p99 with / without analytics (ms) | {r['prepare_p99_ms_with_analytics']}"
            f" / {r['prepare_p99_ms_without_analytics']} | ratio {r['prepare_p99_ratio']}"
            f" (target <= {r['prepare_p99_ratio_target']}) | {r['prepare_calls_per_mode']}"
            f" prepares per mode at {r['prepare_records']:,} records,"
            f" {r['observability_background_per_s']:,} obs. events/s; analytics used"
            f" {r['analytics_cpu_share_with']:.0%} of a core |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--prepare-calls", type=int, default=1000, help="per mode; 0: skip")
    ap.add_argument("--records", type=int, default=1_000, help="in the prepared session")
    ap.add_argument("--obs-rate", type=int, default=500, help="observability events/s")
    r = asyncio.run(bench(ap.parse_args()))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "analytics.json").write_text(json.dumps(r, indent=2))
    print(table(r))


if __name__ == "__main__":
    main()
