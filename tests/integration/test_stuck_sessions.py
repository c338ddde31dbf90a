"""No stuck session (SPEC R9.7, R15.3), through the real broker, database and services.

A compaction job has a deadline; a request that keeps making the worker raise is
quarantined; an unreadable request is dead-lettered; the hard budget starts compaction
even when the ratio trigger is off; a compaction service killed mid-job does not leave
the session waiting forever. The summarizer is the OpenAI-compatible adapter talking to
a scripted (and, for the kill test, slow) Chat Completions server in this process.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from schemas.wire import (
    CompactionOutcome,
    ControlEvent,
    decode_compaction_request,
    decode_dead_letter,
    decode_observability,
    encode_control,
)
from services.sdk.client import ApiError, ContextClient, RunHandle
from tests.support.flows import client, new_session, read_topic, wait_committed
from tests.support.kafka import auth, service_signed
from tests.support.model_server import Script
from tests.support.services import Services, scripted_services
from tests.support.stack import Stack

pytestmark = pytest.mark.integration

TURNS_2 = {"recent_complete_groups": 1, "compaction": {"user_turns": 2}}


@pytest.fixture(scope="module")
def scripted(stack: Stack, pg_dsn: str) -> Iterator[tuple[Services, Script]]:
    with scripted_services(stack, pg_dsn, timeout_s="30", ALC_COMPACTION_WAIT_S="20") as (
        svc,
        script,
    ):
        yield svc, script


@pytest.fixture
def script(scripted: tuple[Services, Script]) -> Script:
    s = scripted[1]
    s.mode, s.delay_s = "ok", 0.0
    return s


@pytest.fixture
def services(scripted: tuple[Services, Script]) -> Services:
    return scripted[0]


@pytest.fixture
async def db(pg_dsn: str, scripted: tuple[Services, Script]) -> AsyncIterator[asyncpg.Pool]:
    # This module's own services: no need for the session-wide default set.
    from storage.pool import create_pool

    pool = await create_pool(pg_dsn, 1, 4)
    yield pool
    await pool.close()


@pytest.fixture
async def ctx(services: Services) -> AsyncIterator[ContextClient]:
    async with client(services) as c:
        yield c


async def question(
    c: ContextClient, session: dict[str, Any], tag: str, rounds: int = 1, tokens: int = 300
) -> RunHandle:
    """A new question, then ``rounds`` complete groups (tool call, result, answer)."""
    run = await c.start_run(session)
    await c.append_user(run, f"Question {tag}?", f"{tag}-q")
    for i in range(rounds):
        t = f"{tag}{i}"
        await c.append_model_result(
            run, f"Looking at {t}.", f"{t}-m1", [(f"{t}-c", "read_file", json.dumps({"p": t}))]
        )
        body = " ".join(f"row{j}={j * 7}" for j in range(tokens // 3))
        await c.append_tool_outcome(run, f"{t}-c", "read_file", body)
        await c.append_model_result(run, f"{t} read.", f"{t}-m2")
    return run


async def two_turns(c: ContextClient, session: dict[str, Any], tag: str) -> RunHandle:
    """Enough for ``user_turns: 2`` to fire with something compressible."""
    first = await question(c, session, f"{tag}a", rounds=2)
    await c.finish_run(first)
    return await question(c, session, f"{tag}b")


async def until(db: asyncpg.Pool, sql: str, *args: Any, timeout: float = 30) -> Any:
    """The first row of ``sql`` once there is one."""
    for _ in range(int(timeout / 0.05)):
        row = await db.fetchrow(sql, *args)
        if row is not None:
            return row
        await asyncio.sleep(0.05)
    raise AssertionError(f"nothing for {sql} {args} in {timeout}s")


async def jobs(db: asyncpg.Pool, sid: str) -> list[Any]:
    return await db.fetch(
        "SELECT * FROM compaction_jobs WHERE session_id=$1 ORDER BY created_at", sid
    )


async def job_done(db: asyncpg.Pool, job_id: str, timeout: float = 60) -> Any:
    return await until(
        db,
        "SELECT * FROM compaction_jobs WHERE job_id=$1 AND status <> 'requested'",
        job_id,
        timeout=timeout,
    )


async def state(db: asyncpg.Pool, sid: str) -> Any:
    return await db.fetchrow(
        "SELECT * FROM compaction_state WHERE session_id=$1 AND lineage='main'", sid
    )


async def notes(services: Services, sid: str, want: int) -> list[Any]:
    """This session's compaction_finished events on the observability topic."""
    out: list[Any] = []
    for _ in range(20):
        raw = await read_topic(
            services.stack.kafka_bootstrap, services.env("ALC_TOPIC_OBSERVABILITY"), 10**6, 1
        )
        out = [
            e
            for e in (decode_observability(v) for _, v in raw)
            if e.session_id == sid and e.kind == "compaction_finished"
        ]
        if len(out) >= want:
            return out
    raise AssertionError(f"only {len(out)} compaction_finished events for {sid}")


async def dead_letters(services: Services, want: int) -> list[Any]:
    """Every dead letter of the module's topic, once there are at least ``want``."""
    out: list[Any] = []
    for _ in range(20):
        raw = await read_topic(
            services.stack.kafka_bootstrap, services.env("ALC_TOPIC_DEAD_LETTER"), 10**6, 1
        )
        out = [decode_dead_letter(v) for _, v in raw]
        if len(out) >= want:
            return out
    raise AssertionError(f"only {len(out)} dead letters")


async def same_partition_session(
    c: ContextClient, services: Services, sid: str, release_id: str
) -> dict[str, Any]:
    """Another session whose compaction requests share ``sid``'s partition."""
    # Every topic has the same partitions (streams.kafka.topics); a runtime may describe records.
    topic = services.env("ALC_TOPIC_RECORDS")
    parts = sorted(await c.producer._producer.partitions_for(topic))
    part = DefaultPartitioner()
    want = part(sid.encode(), parts, parts)
    for i in range(200):
        s = await c.open_session("space-1", f"actor-same-{i}", release_id)
        if part(s["session_id"].encode(), parts, parts) == want:
            return s
    raise AssertionError("no session on the same partition")


# --- a job past its deadline is let go --------------------------------------------------


@pytest.mark.spec("R9.7", "R15.3")
async def test_an_expired_job_is_recorded_and_the_check_starts_a_new_one(
    services: Services, ctx: ContextClient, db: asyncpg.Pool, script: Script
) -> None:
    """A job whose request was lost stays "in flight" only until its deadline: the next
    check records it expired, starts a new job that commits, and the lost job's late
    outcome is ignored — the baseline moves once, from the new job."""
    session = await new_session(ctx, context_policy=TURNS_2)
    sid = session["session_id"]
    run = await two_turns(ctx, session, "x")
    # The state a lost request leaves: a job still "requested", 200 s after it was asked
    # for (the policy's default deadline is 120 s), and nothing that will ever answer.
    policy_rev = await db.fetchval(
        "SELECT r.policy_revision FROM sessions s JOIN releases r USING (release_id)"
        " WHERE s.session_id=$1",
        sid,
    )
    lost = "cmp_lostrequest0001"
    request = {
        "job_id": lost,
        "session_id": sid,
        "run_id": run.run_id,
        "instance_id": run.instance_id,
        "view_watermark": 1,
        "parent_summary_id": None,
        "policy_revision": policy_rev,
        "task_version": 2,
        "trigger_reasons": ["user_turns"],
        "budget_before": 1500,
        "input_budget": 14_500,
        "target_tokens": 8_700,
        "max_calls": 4,
        "requested_at_ms": int(time.time() * 1000) - 200_000,
    }
    await db.execute(
        "INSERT INTO compaction_state (session_id, lineage, policy_revision, active_job_id)"
        " VALUES ($1, 'main', $2, $3)",
        sid,
        policy_rev,
        lost,
    )
    await db.execute(
        "INSERT INTO compaction_jobs (job_id, session_id, lineage, run_id, instance_id,"
        " status, request, observed_user_turns, observed_model_steps)"
        " VALUES ($1,$2,'main',$3,$4,'requested',$5,0,0)",
        lost,
        sid,
        run.run_id,
        run.instance_id,
        request,
    )
    await ctx.prepare(run)
    rep = await until(
        db,
        "SELECT * FROM trigger_reports WHERE session_id=$1 AND event_key LIKE 'obs:%'",
        sid,
    )
    assert rep["decision"] == "job_started", dict(rep)  # not suppressed: job_in_flight
    assert rep["job_id"] != lost
    new = await job_done(db, rep["job_id"])
    assert new["status"] == "committed"
    old = await db.fetchrow("SELECT * FROM compaction_jobs WHERE job_id=$1", lost)
    assert (old["status"], old["stage"]) == ("expired", "deadline")
    st = await state(db, sid)
    assert st["active_job_id"] is None
    assert (st["baseline_user_turns"], st["baseline_model_steps"]) == (2, 6)  # the new job's
    summary_id = st["current_summary_id"]
    # The lost job's outcome turns up after all: it is no longer "requested" — ignored.
    late = ControlEvent(
        f"outcome:{lost}",
        sid,
        run.run_id,
        run.instance_id,
        int(time.time() * 1000),
        CompactionOutcome(
            lost,
            "succeeded",
            "save",
            summary_id="sum_late00000000001",
            summary_json=json.dumps({"draft": {}, "text": "late"}),
            covered_record_ids=(),
            source_watermark=1,
            summary_tokens=1,
            covered_tokens=1000,
        ),
    )
    value = encode_control(late)
    md = await ctx.producer._producer.send_and_wait(
        services.env("ALC_TOPIC_RECORDS"),
        value,
        key=sid.encode(),
        headers=service_signed("compaction", sid.encode(), value),
    )
    await wait_committed(db, services, {md.partition: md.offset})
    old = await db.fetchrow("SELECT * FROM compaction_jobs WHERE job_id=$1", lost)
    assert old["status"] == "expired"
    assert await db.fetchval("SELECT count(*) FROM summary_revisions WHERE session_id=$1", sid) == 1
    st = await state(db, sid)
    assert st["current_summary_id"] == summary_id
    assert (st["baseline_user_turns"], st["baseline_model_steps"]) == (2, 6)
    events = await notes(services, sid, 3)
    by_job = {(e.job_id, e.decision) for e in events}
    assert {(lost, "expired"), (rep["job_id"], "committed"), (lost, "ignored")} <= by_job


# --- a request that makes the worker raise is quarantined ------------------------------


@pytest.mark.spec("R9.7", "R15.3")
async def test_a_request_failing_the_worker_3_times_is_quarantined_and_the_partition_flows(
    services: Services, ctx: ContextClient, db: asyncpg.Pool, script: Script
) -> None:
    """The worker raises on this job (its parent summary's stored draft is corrupt), not
    a normal 'failed' outcome. After 3 attempts the request is dead-lettered with the
    reason, the job is failed with the baseline unmoved, and a later job for another
    session on the same partition still commits."""
    session = await new_session(ctx, context_policy=TURNS_2)
    sid = session["session_id"]
    run = await two_turns(ctx, session, "p")
    await ctx.prepare(run)
    first = await until(
        db,
        "SELECT * FROM compaction_jobs WHERE session_id=$1 AND status <> 'requested'",
        sid,
    )
    assert first["status"] == "committed"
    parent = (await state(db, sid))["current_summary_id"]
    await db.execute(
        "UPDATE summary_revisions SET summary = '\"corrupt\"'::jsonb WHERE summary_id=$1", parent
    )
    other = await same_partition_session(ctx, services, sid, session["release_id"])
    await ctx.finish_run(run)
    hits = script.hits
    # Two more questions: the next job (started by the processor's pre-emptive check or
    # by this prepare's), whose parent is the corrupt summary.
    run = await two_turns(ctx, session, "q")
    await ctx.prepare(run)
    poison = await until(
        db,
        "SELECT * FROM compaction_jobs WHERE session_id=$1 AND job_id <> $2",
        sid,
        first["job_id"],
    )
    # Queued behind the poison job on the same partition.
    later_run = await two_turns(ctx, other, "r")
    await ctx.prepare(later_run)
    done = await job_done(db, poison["job_id"])
    assert (done["status"], done["stage"]) == ("failed", "worker")
    assert done["reason"].startswith("quarantined:")
    assert script.hits - hits >= 3  # one model call per attempt, then no more
    st = await state(db, sid)
    assert st["active_job_id"] is None
    assert st["current_summary_id"] == parent  # baseline unmoved
    assert (st["baseline_user_turns"], st["baseline_model_steps"]) == (2, 6)
    later = await until(
        db, "SELECT * FROM compaction_jobs WHERE session_id=$1", other["session_id"]
    )
    assert (await job_done(db, later["job_id"]))["status"] == "committed"
    letters = [d for d in await dead_letters(services, 1) if d.event_key == poison["job_id"]]
    assert len(letters) == 1
    (dl,) = letters
    assert dl.reason_code == "compaction_worker_failed" and dl.session_id == sid
    assert "3 times" in dl.reason and "InvalidSummary" in dl.reason
    assert dl.source_topic == services.env("ALC_TOPIC_COMPACTION_REQUESTS")
    assert dl.value is not None
    assert decode_compaction_request(dl.value).job_id == poison["job_id"]
    # The failed outcome was saved: a redelivery republishes it, never works again.
    op = await db.fetchrow("SELECT * FROM compaction_operations WHERE job_id=$1", poison["job_id"])
    assert op["status"] == "failed" and op["stage"] == "worker"
    assert services.compaction.popen is not None and services.compaction.popen.poll() is None


@pytest.mark.spec("R15.3")
async def test_an_unreadable_request_is_dead_lettered_and_the_loop_goes_on(
    services: Services, ctx: ContextClient, db: asyncpg.Pool, script: Script
) -> None:
    session = await new_session(ctx, context_policy=TURNS_2)
    sid = session["session_id"]
    topic = services.env("ALC_TOPIC_COMPACTION_REQUESTS")
    # As the processor (the only writer of requests): a runtime may write records only.
    producer = AIOKafkaProducer(bootstrap_servers=services.stack.kafka_bootstrap, **auth())
    await producer.start()
    try:
        bad = await producer.send_and_wait(topic, b"\x00garbage", key=sid.encode())
        empty = await producer.send_and_wait(topic, None, key=sid.encode())
    finally:
        await producer.stop()
    run = await two_turns(ctx, session, "u")
    await ctx.prepare(run)
    job = await until(db, "SELECT * FROM compaction_jobs WHERE session_id=$1", sid)
    assert (await job_done(db, job["job_id"]))["status"] == "committed"
    mine = {
        d.source_offset: d
        for d in await dead_letters(services, 2)
        if d.source_topic == topic and d.source_partition == bad.partition
    }
    assert mine[bad.offset].reason_code == "bad_header"
    assert mine[bad.offset].value == b"\x00garbage"
    assert mine[empty.offset].reason_code == "undecodable"
    assert services.compaction.popen is not None and services.compaction.popen.poll() is None


# --- the hard budget implies compaction -------------------------------------------------


@pytest.mark.spec("R9.7", "R15.3")
async def test_over_the_hard_budget_a_job_starts_even_with_context_ratio_null(
    ctx: ContextClient, db: asyncpg.Pool, script: Script
) -> None:
    budget = 3_000
    session = await new_session(
        ctx,
        model_profile={
            "name": "m3000",
            "context_capacity": budget,
            "output_reserve": 0,
            "safety_margin": 0,
        },
        context_policy={
            "recent_complete_groups": 1,
            "compaction": {"context_ratio": None, "user_turns": 50},
        },
    )
    sid = session["session_id"]
    run = await question(ctx, session, "h", rounds=12)  # ~4,000 tokens of history
    try:
        prepared = await ctx.prepare(run)
    except ApiError as err:  # R9.7: refused over the hard budget — but the job started
        assert err.code == "context_budget_exceeded", err
        prepared = None
    rep = await until(
        db,
        "SELECT * FROM trigger_reports WHERE session_id=$1 AND event_key LIKE 'obs:%'",
        sid,
    )
    assert rep["fired"] == ["hard_budget"] and rep["decision"] == "job_started"
    assert rep["values"]["hard_budget_tokens"] > budget
    job = await job_done(db, rep["job_id"])
    assert job["status"] == "committed"
    assert job["request"]["trigger_reasons"] == ["hard_budget"]
    if prepared is None:
        prepared = await ctx.prepare(run)
    assert prepared["budget"]["estimated_input"] <= budget
    assert any(m["block"] == "summary" for m in prepared["messages"])


# --- kill -9 of the compaction service mid-job ------------------------------------------


@pytest.mark.spec("R9.7", "R15.3")
async def test_compaction_killed_mid_job_the_session_recovers_after_the_deadline(
    services: Services, ctx: ContextClient, db: asyncpg.Pool, script: Script
) -> None:
    session = await new_session(
        ctx,
        context_policy={
            "recent_complete_groups": 1,
            "compaction": {"user_turns": 2, "job_timeout_s": 3},
        },
    )
    sid = session["session_id"]
    run = await two_turns(ctx, session, "k")
    script.delay_s = 20  # the model is slow: the job is mid-call when the service dies
    hits = script.hits
    await ctx.prepare(run)
    first = await until(db, "SELECT * FROM compaction_jobs WHERE session_id=$1", sid)
    for _ in range(400):
        if script.hits > hits:
            break
        await asyncio.sleep(0.05)
    assert script.hits == hits + 1, "the job never reached the model"
    services.compaction.kill9()
    try:
        # Not restarted until the job is past its 3 s deadline.
        requested_at = first["request"]["requested_at_ms"] / 1000
        await asyncio.sleep(max(0.0, requested_at + 3.5 - time.time()))
        status = await db.fetchval(
            "SELECT status FROM compaction_jobs WHERE job_id=$1", first["job_id"]
        )
        assert status == "requested"  # nothing answered
        await ctx.prepare(run)  # the same state: the next trigger check
        reps = await db.fetch(
            "SELECT * FROM trigger_reports WHERE session_id=$1 AND event_key LIKE 'obs:%'"
            " ORDER BY report_id",
            sid,
        )
        for _ in range(200):
            if len(reps) >= 2:
                break
            await asyncio.sleep(0.05)
            reps = await db.fetch(
                "SELECT * FROM trigger_reports WHERE session_id=$1 AND event_key LIKE 'obs:%'"
                " ORDER BY report_id",
                sid,
            )
        assert len(reps) == 2
        assert reps[1]["decision"] == "job_started", dict(reps[1])
        second = reps[1]["job_id"]
        assert second != first["job_id"]
        old = await db.fetchrow("SELECT * FROM compaction_jobs WHERE job_id=$1", first["job_id"])
        assert old["status"] == "expired"
        assert (await state(db, sid))["active_job_id"] == second
    finally:
        script.delay_s = 0.0
        services.compaction.start()
    new = await job_done(db, second)
    assert new["status"] == "committed"
    assert [j["status"] for j in await jobs(db, sid)] == ["expired", "committed"]
    revs = await db.fetch("SELECT job_id FROM summary_revisions WHERE session_id=$1", sid)
    assert [r["job_id"] for r in revs] == [second]  # the baseline moved exactly once
    st = await state(db, sid)
    assert (st["baseline_user_turns"], st["baseline_model_steps"]) == (2, 6)
    # The restarted service skipped the expired job's redelivered request: model calls
    # for the new job only, none again for the old one.
    calls = await db.fetchval(
        "SELECT model_calls FROM compaction_operations WHERE job_id=$1", second
    )
    assert calls >= 1 and script.hits == hits + 1 + calls
    events = await notes(services, sid, 2)
    assert {(first["job_id"], "expired"), (second, "committed")} <= {
        (e.job_id, e.decision) for e in events
    }
