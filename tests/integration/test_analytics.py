"""Analytics and metrics through the real broker and database (SPEC R18, issue 12).

The analytics service runs as its own process and consumer group beside the test
services; its rollups are checked against a recount straight from the raw topics."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from datetime import UTC

import asyncpg
import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from devstack.launcher import Proc
from domain.rollup import (
    Dims,
    Fact,
    RollupKey,
    attributed,
    bucket,
    dead_letter_increments,
    observability_increments,
    rollup,
)
from schemas.contracts import Content, ToolStatus
from schemas.wire import (
    ObservabilityEvent,
    decode_dead_letter,
    decode_observability,
    encode_observability,
)
from services.sdk.client import ContextClient
from storage.analytics import session_dims
from tests.support import events as ev
from tests.support.flows import client, new_session, wait_committed
from tests.support.kafka import auth
from tests.support.services import TEST_SPACE, Services

pytestmark = [pytest.mark.integration, pytest.mark.spec("R18")]


async def _traffic(c: ContextClient, questions: int = 3) -> None:
    """Real runs: appends, a tool group, prepares; then one append to an ended run, which
    the processor dead-letters (run_not_active)."""
    session = await new_session(c)
    for q in range(questions):
        run = await c.start_run(session)
        await c.append_user(run, f"question {q}: what is in README?", event_key=f"q{q}")
        await c.append_model_result(
            run, "Reading it.", f"op-{q}", [(f"c{q}", "read_file", '{"path": "README.md"}')]
        )
        await c.append_tool_outcome(run, f"c{q}", "read_file", "# AgentLoom " * 50, ToolStatus.OK)
        await c.prepare(run)
        await c.finish_run(run)
    await c.append_user(run, "too late", event_key="late")


async def _raw(services: Services) -> tuple[list[tuple[str, Fact]], dict[TopicPartition, int]]:
    """Every message of the observability and dead-letter topics, as (session, fact)."""
    topics = [services.env("ALC_TOPIC_OBSERVABILITY"), services.env("ALC_TOPIC_DEAD_LETTER")]
    consumer = AIOKafkaConsumer(
        *topics, bootstrap_servers=services.stack.kafka_bootstrap, **auth(), group_id=None,
        auto_offset_reset="earliest", enable_auto_commit=False,
    )  # fmt: skip
    await consumer.start()
    out: list[tuple[str, Fact]] = []
    try:
        while not consumer.assignment():
            await asyncio.sleep(0.05)
        ends = await consumer.end_offsets(list(consumer.assignment()))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            assert loop.time() < deadline, "could not read the topics to their end"
            for tp, msgs in (await consumer.getmany(timeout_ms=300)).items():
                for m in msgs:
                    if tp.topic == topics[1]:
                        dl = decode_dead_letter(m.value or b"")
                        space = Dims(space_id=dl.space_id or "")
                        f = Fact(dl.failed_at_ms, space, dead_letter_increments(dl))
                        out.append((dl.session_id or "", f))
                    else:
                        ev = decode_observability(m.value or b"")
                        f = Fact(
                            ev.occurred_at_ms,
                            Dims(space_id=ev.space_id or "", purpose=ev.purpose or ""),
                            observability_increments(ev),
                        )
                        out.append((ev.session_id, f))
    finally:
        await consumer.stop()
    return out, ends


async def _recount(pool: asyncpg.Pool, services: Services) -> dict[RollupKey, int]:
    raw, _ = await _raw(services)
    dims = await session_dims(pool, sorted({s for s, _ in raw if s}))
    facts = []
    for sid, f in raw:
        counted = attributed(dims.get(sid, Dims()), f.dims.space_id or None, f.dims.purpose)
        facts.append(Fact(f.at_ms, counted, f.increments))
    return {k: v for k, v in rollup(facts).items() if v}


async def _stored(pool: asyncpg.Pool) -> dict[RollupKey, int]:
    rows = await pool.fetch("SELECT * FROM analytics_rollups")
    return {
        RollupKey(
            r["window_name"],
            int(r["bucket_start"].astimezone(UTC).timestamp() * 1000),
            Dims(r["space_id"], r["agent_id"], r["release_id"], r["model"], r["purpose"]),
            r["metric"],
            r["label"],
        ): r["value"]
        for r in rows
        if r["value"]
    }


async def _caught_up(services: Services, group: str, timeout: float = 60.0) -> None:
    """Until the analytics group's committed offsets reach the topics' ends."""
    _, ends = await _raw(services)
    admin = AIOKafkaAdminClient(bootstrap_servers=services.stack.kafka_bootstrap, **auth())
    await admin.start()
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            done = await admin.list_consumer_group_offsets(group)
            if all(e == 0 or (tp in done and done[tp].offset >= e) for tp, e in ends.items()):
                return
            assert asyncio.get_running_loop().time() < deadline, f"behind: {done} < {ends}"
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def _rewind(services: Services, group: str) -> None:
    """Reset the (stopped) analytics group to the beginning of both topics."""
    topics = [services.env("ALC_TOPIC_OBSERVABILITY"), services.env("ALC_TOPIC_DEAD_LETTER")]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=services.stack.kafka_bootstrap, **auth(), group_id=group,
        enable_auto_commit=False,
    )  # fmt: skip
    await consumer.start()
    try:
        parts = [TopicPartition(t, p) for t in topics for p in range(4)]
        consumer.assign(parts)
        await consumer.commit({tp: 0 for tp in parts})
    finally:
        await consumer.stop()


async def _agreed(
    pool: asyncpg.Pool, services: Services, group: str, timeout: float = 30.0
) -> tuple[dict[RollupKey, int], dict[RollupKey, int]]:
    """The stored rollups and a recount of the raw events, once they agree with the group
    caught up (a dead letter and its notes are published after their batch commits, so
    they may still arrive after the appends that caused them were acknowledged), or as
    they stand at ``timeout``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        await _caught_up(services, group)
        stored = await _stored(pool)
        recounted = await _recount(pool, services)
        if stored == recounted or asyncio.get_running_loop().time() > deadline:
            return stored, recounted
        await asyncio.sleep(0.3)


@pytest.fixture
async def pool(services: Services) -> asyncpg.Pool:
    p = await asyncpg.create_pool(services.env("ALC_PG_DSN"), min_size=1, max_size=2)
    yield p
    await p.close()


async def test_rollups_equal_a_recount_of_the_raw_events(
    services: Services, analytics: Proc, pool: asyncpg.Pool
) -> None:
    async with client(services) as c:
        await _traffic(c)
    stored, recounted = await _agreed(pool, services, analytics.env["ALC_ANALYTICS_GROUP"])
    assert stored == recounted
    metrics = {k.metric for k in stored if k.dims.space_id == TEST_SPACE}
    assert {"prepares", "estimated_input_tokens", "trigger_checks"} <= metrics
    assert any(k.metric == "dead_letters" for k in stored)
    assert any(k.metric == "processor_dead_letters" and k.label == "run_not_active" for k in stored)

    # The read API: the key's own space, filtered.
    headers = {"Authorization": f"Bearer {services.api_key}"}
    async with httpx.AsyncClient(base_url=services.prepare_url, headers=headers) as http:
        r = await http.get("/v1/analytics/rollups", params={"window": "1h", "agent": "test-agent"})
        assert r.status_code == 200, r.text
        body = r.json()
        prepares = sum(x["value"] for x in body["rows"] if x["metric"] == "prepares")
        assert prepares >= 3
        assert {x["space_id"] for x in body["rows"]} == {TEST_SPACE}
        dists = [d for d in body["distributions"] if d["metric"] == "estimated_input_tokens"]
        assert sum(d["count"] for d in dists) == prepares
        assert all(0 < d["p50"] <= d["p95"] for d in dists)
        other = await http.get("/v1/analytics/rollups", params={"space": "someone-else"})
        assert other.status_code == 404


async def test_analytics_down_then_replayed_from_the_beginning_yields_the_same_rollups(
    services: Services, analytics: Proc, pool: asyncpg.Pool
) -> None:
    group = analytics.env["ALC_ANALYTICS_GROUP"]
    analytics.stop()
    before = await _stored(pool)
    # The core does not wait for analytics: runs, appends and prepares go on.
    async with client(services) as c:
        await asyncio.wait_for(_traffic(c, questions=2), 60)
    assert await _stored(pool) == before
    await _rewind(services, group)  # and replay everything, old and new
    analytics.start()
    await asyncio.sleep(1.0)
    await _caught_up(services, group)
    assert await _stored(pool) == await _recount(pool, services)


async def test_a_late_event_lands_in_the_window_of_its_own_time(
    services: Services, analytics: Proc, pool: asyncpg.Pool
) -> None:
    """Event time, not arrival time: an event two hours old, published after a newer one,
    is counted in its own (old) 1m and 1h windows."""
    purpose = f"late-{uuid.uuid4().hex[:8]}"  # rows of this test only
    now = int(time.time() * 1000)
    old = now - 2 * 3_600_000
    producer = AIOKafkaProducer(bootstrap_servers=services.stack.kafka_bootstrap, **auth())
    await producer.start()
    try:
        for at, tokens in ((now, 100), (old, 7)):
            ev = ObservabilityEvent("prepare_budget", "no-such-session", "r", "i", at, "p",
                                    purpose=purpose, estimated_input=tokens)  # fmt: skip
            await producer.send_and_wait(
                services.env("ALC_TOPIC_OBSERVABILITY"), encode_observability(ev), key=b"late"
            )
    finally:
        await producer.stop()
    await _caught_up(services, analytics.env["ALC_ANALYTICS_GROUP"])
    rows = await pool.fetch(
        "SELECT window_name, bucket_start, value FROM analytics_rollups"
        " WHERE purpose=$1 AND metric='estimated_input_tokens'",
        purpose,
    )
    got = {(r["window_name"], int(r["bucket_start"].timestamp() * 1000)): r["value"] for r in rows}
    assert got == {
        ("1m", bucket(now, "1m")): 100,
        ("1h", bucket(now, "1h")): 100,
        ("1m", bucket(old, "1m")): 7,
        ("1h", bucket(old, "1h")): 7,
    }


async def test_a_forged_event_counts_in_its_signers_space_never_in_the_sessions(
    services: Services, analytics: Proc, pool: asyncpg.Pool
) -> None:
    """Issue 38: tenant B signs with its own key but names A's session; its refusals are
    dead-lettered and counted under B's space, and A's numbers never move."""
    tag = uuid.uuid4().hex[:6]
    b_space, a_agent = f"space-b-{tag}", f"agent-a-{tag}"
    b_key = await services.new_key(b_space)
    async with client(services) as a:
        run = await a.start_run(await new_session(a, agent_id=a_agent))
        await a.append_user(run, "A's question", "a-q")
        await a.prepare(run)
    as_b = dataclasses.replace(run, space_id=b_space)
    dangling = Content.reference("f" * 64, 9, "text/plain")
    async with client(services, b_key.key) as b:
        sent = await b.producer.send_many(
            [
                ev.user(as_b, "B writes as B into A's session", "b-scope"),  # scope_mismatch
                dataclasses.replace(ev.user(as_b, "x", "b-blob"), content=dangling),
                ev.user(run, "B writes as A", "b-as-a"),  # another space than its key's
            ]
        )
    await wait_committed(pool, services, dict(sent))
    codes = {"scope_mismatch", "blob_missing", "unauthenticated_event"}
    wanted = {(m, c) for m in ("dead_letters", "processor_dead_letters") for c in codes}
    # The letters and their notes are published after their batch commits: counted once
    # the analytics group has read them.
    deadline = asyncio.get_running_loop().time() + 30.0
    while True:
        await _caught_up(services, analytics.env["ALC_ANALYTICS_GROUP"])
        rows = await pool.fetch(
            "SELECT space_id, agent_id, metric, label FROM analytics_rollups"
            " WHERE window_name='1h' AND value > 0"
        )
        mine = {(r["metric"], r["label"]) for r in rows if r["space_id"] == b_space}
        if mine >= wanted or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.3)
    assert mine == wanted
    of_a = {(r["metric"], r["label"]) for r in rows if r["agent_id"] == a_agent}
    assert ("prepares", "") in of_a  # A's numbers are there ...
    assert not {m for m, _ in of_a} & {"dead_letters", "processor_dead_letters"}  # ... alone
    assert not await pool.fetchval(
        "SELECT 1 FROM event_outcomes WHERE session_id=$1 AND event_key LIKE 'b-%'",
        run.session_id,
    )


def _sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        ours = line.startswith(name + "{") or line.startswith(name + " ")
        if ours and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_metrics_are_scraped_and_move_with_traffic(
    services: Services, analytics: Proc
) -> None:
    port = analytics.env["ALC_METRICS_PORT"]
    async with httpx.AsyncClient() as http:
        prep0 = (await http.get(f"{services.prepare_url}/metrics")).text
        ana0 = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
        async with client(services) as c:
            await _traffic(c, questions=2)
        await asyncio.sleep(1.0)
        await _caught_up(services, analytics.env["ALC_ANALYTICS_GROUP"])
        prep1 = (await http.get(f"{services.prepare_url}/metrics")).text
        ana1 = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    count = "agentloom_prepare_seconds_count"
    assert _sample(prep1, count, purpose="action", outcome="ok") >= (
        _sample(prep0, count, purpose="action", outcome="ok") + 2
    )
    route = "/v1/sessions/{session_id}/runs/{run_id}/prepare"
    reqs = "agentloom_http_requests_total"
    assert _sample(prep1, reqs, route=route, status="200") > _sample(
        prep0, reqs, route=route, status="200"
    )
    events = "agentloom_analytics_events_total"
    assert _sample(ana1, events) > _sample(ana0, events)
    assert _sample(ana1, "agentloom_dead_letters_total", reason="run_not_active") >= 1
