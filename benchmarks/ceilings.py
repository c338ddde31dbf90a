"""This machine's raw ceilings, measured in the same run as the pipeline (``make bench``):
the aiokafka producer alone, asyncpg COPY alone, and a no-op faust agent's read rate."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import uuid
from typing import Any

import asyncpg
from aiokafka import AIOKafkaProducer

from domain.record_rows import RECORD_COLUMNS
from schemas.settings import Settings
from streams.kafka.auth import kafka_auth
from streams.kafka.batches import send_in_batches
from streams.kafka.partitioning import cached_partitioner
from streams.kafka.provision import ensure_bus


async def producer_ceiling(
    s: Settings, payloads: list[bytes], keys: list[bytes], *, batch_api: bool = False
) -> float:
    """The aiokafka producer alone on pre-encoded events (acks=all, idempotent): one
    ``send`` per message (the ceiling issue 13 names), or with ``batch_api`` the batch
    API our SDK and processor now use (``streams.kafka.batches``)."""
    topic = f"bench.raw.{uuid.uuid4().hex[:6]}"
    await ensure_bus(s, [topic])  # the broker creates no topic on first use
    p = AIOKafkaProducer(
        bootstrap_servers=s.kafka_bootstrap,
        **kafka_auth(s, "admin").client_kwargs(),
        acks="all",
        enable_idempotence=True,
        linger_ms=2,
        max_batch_size=1 << 20,
        partitioner=cached_partitioner,
    )
    await p.start()
    try:
        t0 = time.perf_counter()
        if batch_api:
            msgs = [(topic, k, v, None) for v, k in zip(payloads, keys, strict=True)]
            futs = [pl.future for pl in await send_in_batches(p, msgs)]
        else:
            futs = [await p.send(topic, v, key=k) for v, k in zip(payloads, keys, strict=True)]
        await asyncio.gather(*futs)
        return len(payloads) / (time.perf_counter() - t0)
    finally:
        await p.stop()


def bench_row(i: int, text: str = "some text of a record") -> tuple[Any, ...]:
    """A ``records`` row (``RECORD_COLUMNS``) like the processor writes, for COPY alone."""
    return (
        f"s{i % 50}", i, f"rec{i}", f"k{i}", "sp", "ac", "r", "i", i, "user_input", "user",
        "session", None, text, None, "0" * 64, len(text.encode()), "text/plain",
        {"type": "UserInputPayload", "intent": "question"}, 6, "tiktoken:cl100k_base",
        "bench", 0, 0, i, None,
    )  # fmt: skip


async def copy_ceiling(pool: asyncpg.Pool, n: int) -> float:
    rows = [bench_row(i) for i in range(n)]
    async with pool.acquire() as conn:
        await conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS bench_records (LIKE records INCLUDING DEFAULTS)"
        )
        t0 = time.perf_counter()
        for i in range(0, n, 2000):  # the processor's batch size
            async with conn.transaction():
                await conn.copy_records_to_table(
                    "bench_records", records=rows[i : i + 2000], columns=RECORD_COLUMNS
                )
        return n / (time.perf_counter() - t0)


async def noop_faust_rate(topic: str, count: int, env: dict[str, str]) -> float:
    """Read ``count`` messages of ``topic`` with a no-op faust agent (benchmarks.noop_faust,
    a process of its own like the processor); its events/s, start-up excluded."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.noop_faust",
        "--topic",
        topic,
        "--count",
        str(count),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=600)
    # faust routes stdout through its logging: find the JSON line wherever it landed.
    found = re.search(r'\{"events".*?\}', out.decode(errors="replace"))
    if found is None:
        raise RuntimeError(f"no-op faust agent printed no result:\n{out.decode()[-2000:]}")
    return float(json.loads(found.group(0))["events_per_s"])
