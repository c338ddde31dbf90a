"""The soak's reads: Kafka end offsets, the processor's tracking rows, the rows of the
soak's sessions and the compaction service's logs (for ``benchmarks.soak_check``); whether
a restarted broker answers again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from schemas.settings import Settings
from streams.kafka.auth import kafka_auth


async def wait_caught_up(
    bootstrap: str, topic: str, partitions: int, dsn: str, consumer: str, timeout_s: float
) -> float | None:
    """Seconds until the processor committed up to the topic's end offsets; None if not."""
    t0 = time.monotonic()
    kc = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, **kafka_auth(Settings(), "admin").client_kwargs()
    )
    await kc.start()
    try:
        ends = await kc.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    finally:
        await kc.stop()
    conn = await asyncpg.connect(dsn)
    try:
        while time.monotonic() - t0 < timeout_s:
            rows = await conn.fetch(
                "SELECT partition, next_offset FROM consumer_offsets"
                " WHERE consumer=$1 AND topic=$2",
                consumer,
                topic,
            )
            done = {r["partition"]: r["next_offset"] for r in rows}
            if all(done.get(tp.partition, 0) >= end for tp, end in ends.items()):
                return round(time.monotonic() - t0, 1)
            await asyncio.sleep(0.5)
        return None
    finally:
        await conn.close()


async def broker_answers(address: str, node_id: int) -> bool:
    """The broker at ``address`` answers a metadata request that lists itself (it rejoined
    the cluster)."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=address,
        **kafka_auth(Settings(), "admin").client_kwargs(),
        request_timeout_ms=3000,
    )
    try:
        await asyncio.wait_for(admin.start(), 5)
        cluster = await asyncio.wait_for(admin.describe_cluster(), 5)
    except (KafkaError, OSError, TimeoutError):
        return False
    finally:
        await admin.close()
    return any(b["node_id"] == node_id for b in cluster["brokers"])


async def fetch(dsn: str, sessions: list[str]) -> dict[str, list[dict[str, Any]]]:
    conn = await asyncpg.connect(dsn)
    try:
        queries = {
            "records": "SELECT r.session_id, r.event_key, r.session_sequence, r.run_id,"
            " r.instance_id, r.instance_sequence, r.kind, r.operation_id,"
            " r.payload->>'purpose' AS purpose, (r.instance_id = u.main_instance_id) AS main"
            " FROM records r LEFT JOIN runs u USING (session_id, run_id)"
            " WHERE r.session_id = ANY($1)",
            "sessions": "SELECT session_id, next_session_sequence, user_turns, model_steps"
            " FROM sessions WHERE session_id = ANY($1)",
            "threads": "SELECT session_id, run_id, instance_id, next_instance_sequence"
            " FROM threads WHERE session_id = ANY($1)",
            "outcomes": "SELECT session_id, event_key, outcome, code FROM event_outcomes"
            " WHERE session_id = ANY($1)",
            "jobs": "SELECT j.job_id, j.status, j.reason, o.status AS op_status,"
            " o.model_calls, extract(epoch FROM o.created_at) AS saved_at"
            " FROM compaction_jobs j LEFT JOIN compaction_operations o USING (job_id)"
            " WHERE j.session_id = ANY($1)",
        }
        return {k: [dict(r) for r in await conn.fetch(q, sessions)] for k, q in queries.items()}
    finally:
        await conn.close()


def compaction_log_lines(log_dir: Path) -> Iterator[str]:
    """Every line of every compaction service incarnation's log."""
    for path in sorted(log_dir.glob("compaction-*.log")):
        yield from path.read_text(errors="replace").splitlines()
