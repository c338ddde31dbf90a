"""``make bench`` row (issue 12): analytics throughput — observability events per second
consumed and rolled up into PostgreSQL by the analytics group's own batch handler —
beside the producer ceiling (the same events written by an aiokafka producer alone,
acks=all) measured in the same run.

Its own database, topics and consumer group. Prints one table row and writes
``build/bench/analytics.json``. (The core's prepare p99 with and without the analytics
group running is not measured here yet: see the README's analytics section.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
import uuid
from pathlib import Path

import asyncpg
from aiokafka import AIOKafkaProducer

from schemas.settings import Settings
from schemas.wire import ObservabilityEvent, encode_observability
from services.analytics.__main__ import consumer_of
from services.analytics.pipeline import Pipeline
from storage.migrate import apply_dsn
from storage.pool import create_pool
from streams.topics import ensure_topics

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


async def bench(n: int) -> dict[str, float]:
    base = Settings()
    tag = uuid.uuid4().hex[:6]
    db = f"alc_bench_analytics_{tag}"
    conn = await asyncpg.connect(base.pg_dsn)
    await conn.execute(f'CREATE DATABASE "{db}"')
    await conn.close()
    s = replace_settings(base, db, tag)
    await apply_dsn(s.pg_dsn)
    await ensure_topics(s, [s.topic_observability, s.topic_dead_letter])
    payloads = [encode_observability(e) for e in _events(n, int(time.time() * 1000))]
    try:
        ceiling = await _produce(s, s.topic_observability, payloads)
        rate = await _consume(s, n)
    finally:
        conn = await asyncpg.connect(base.pg_dsn)
        await conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        await conn.close()
    return {"events": n, "producer_ceiling_per_s": ceiling, "analytics_per_s": rate}


def replace_settings(base: Settings, db: str, tag: str) -> Settings:
    return base.model_copy(
        update={
            "pg_dsn": base.pg_dsn.rsplit("/", 1)[0] + "/" + db,
            "topic_observability": f"bench{tag}.observability",
            "topic_dead_letter": f"bench{tag}.deadletter",
            "analytics_group": f"alc-bench-analytics-{tag}",
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=20_000)
    args = ap.parse_args()
    r = asyncio.run(bench(args.events))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "analytics.json").write_text(json.dumps(r, indent=2))
    print(
        f"| analytics rollups (events/s consumed + rolled up) | {r['analytics_per_s']:,.0f} |"
        f" producer ceiling {r['producer_ceiling_per_s']:,.0f}/s"
        f" ({r['analytics_per_s'] / r['producer_ceiling_per_s']:.0%}) | {int(r['events'])} events |"
    )


if __name__ == "__main__":
    main()
