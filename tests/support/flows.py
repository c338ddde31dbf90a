"""Helpers the integration tests share: clients bound to the test services, waiting for
commits, reading topics."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer

from schemas.contracts import ToolStatus
from services.sdk.client import ContextClient
from tests.support import events as ev
from tests.support.kafka import auth
from tests.support.services import TEST_SPACE, Services

PROFILE = {
    "name": "test-model",
    "context_capacity": 16000,
    "output_reserve": 1000,
    "safety_margin": 500,
}


@asynccontextmanager
async def client(services: Services, api_key: str | None = None) -> AsyncIterator[ContextClient]:
    """A runtime client with the test stack's host key (or ``api_key``)."""
    async with ContextClient(
        services.stack.kafka_bootstrap,
        services.prepare_url,
        topic=services.env("ALC_TOPIC_RECORDS"),
        api_key=api_key if api_key is not None else services.api_key,
    ) as c:
        yield c


async def new_session(c: ContextClient, **release: Any) -> dict[str, Any]:
    body = {
        "agent_id": "test-agent",
        "instructions": "You are a careful test agent.",
        "tool_catalog": [
            {
                "name": "read_file",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }
        ],
        "model_profile": PROFILE,
    } | release
    rel = await c.register_release(**body)
    return await c.open_session(TEST_SPACE, f"actor-{uuid.uuid4().hex[:6]}", rel["release_id"])


async def wait_committed(
    pool: asyncpg.Pool, services: Services, offsets: dict[int, int], timeout: float = 60.0
) -> None:
    """Until the processor's tracking rows pass every (partition -> offset)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        rows = await pool.fetch(
            "SELECT partition, next_offset FROM consumer_offsets WHERE consumer=$1 AND topic=$2",
            services.env("ALC_PROCESSOR_ID"),
            services.env("ALC_TOPIC_RECORDS"),
        )
        done = {r["partition"]: r["next_offset"] for r in rows}
        if all(done.get(p, 0) > o for p, o in offsets.items()):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not committed in {timeout}s: want {offsets}, have {done}")
        await asyncio.sleep(0.05)


def question_stream(runs: list[Any], rounds: int, tag: str) -> list[Any]:
    """``rounds`` question rounds of every run, interleaved: each a question, an assistant
    message with two calls, their results (one ok, one failed) and an answer."""
    stream = []
    for r in range(rounds):
        for run in runs:
            stream += ev.question_round(run, f"{tag}{r}", (ToolStatus.OK, ToolStatus.ERROR))
    return stream


def last_offsets(sent: list[tuple[int, int]]) -> dict[int, int]:
    """The highest of the (partition, offset) pairs ``sent``, by partition:
    ``wait_committed``'s argument."""
    last: dict[int, int] = {}
    for p, o in sent:
        last[p] = max(last.get(p, -1), o)
    return last


async def assert_whole(db: asyncpg.Pool, session_ids: list[str], rounds: int) -> None:
    """Each session holds exactly its run's start and ``rounds`` rounds of
    ``question_stream``: nothing lost, nothing twice, no gaps in either sequence, and
    counters that count them once."""
    whole = list(range(1, 1 + rounds * 5 + 1))
    for sid in session_ids:
        rows = await db.fetch(
            "SELECT session_sequence, instance_sequence FROM records WHERE session_id=$1"
            " ORDER BY session_sequence",
            sid,
        )
        assert [r["session_sequence"] for r in rows] == whole
        assert sorted(r["instance_sequence"] for r in rows) == whole
        counters = await db.fetchrow(
            "SELECT user_turns, model_steps FROM sessions WHERE session_id=$1", sid
        )
        assert tuple(counters) == (1, rounds * 2)


async def read_topic(
    bootstrap: str, topic: str, want: int, timeout: float = 30.0
) -> list[tuple[bytes | None, bytes]]:
    """Read a topic from the beginning until ``want`` messages arrived (or time out)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        **auth(),
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    out: list[tuple[bytes | None, bytes]] = []
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while len(out) < want and asyncio.get_running_loop().time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for msgs in batch.values():
                out.extend((m.key, m.value) for m in msgs)
    finally:
        await consumer.stop()
    return out
