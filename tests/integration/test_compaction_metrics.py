"""The compaction process's Prometheus /metrics through the real broker and database
(SPEC R18, issue 12): scraped before and after traffic that makes it compact, the job,
summarizer, token and lag series move."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator

import asyncpg
import httpx
import pytest
from aiokafka import AIOKafkaProducer

from devstack.launcher import COMPACTION_READY, Proc
from tests.integration.test_compaction import question, settled
from tests.support.flows import client, new_session
from tests.support.kafka import auth
from tests.support.services import LOG_DIR, Services, free_port, scripted_services
from tests.support.stack import REPO, Stack

pytestmark = [pytest.mark.integration, pytest.mark.spec("R18")]


@pytest.fixture(scope="module")
def metered(stack: Stack, pg_dsn: str) -> Iterator[tuple[Services, str]]:
    """Our services with a scripted model behind the summarizer; their compaction
    process replaced by one that serves /metrics (the port is for it alone)."""
    with scripted_services(stack, pg_dsn) as (svc, _script):
        svc.compaction.stop()
        port = str(free_port())
        env = {**os.environ, **svc.settings_env, "ALC_METRICS_PORT": port}
        env["PYTHONUNBUFFERED"] = "1"
        logs = LOG_DIR / svc.env("ALC_PROCESSOR_ID")
        argv = [sys.executable, "-m", "services.compaction"]
        proc = Proc("compaction-metered", argv, env, logs, COMPACTION_READY, cwd=REPO)
        proc.start()
        try:
            yield svc, f"http://127.0.0.1:{port}/metrics"
        finally:
            proc.stop()


def _sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        ours = line.startswith(name + "{") or line.startswith(name + " ")
        if ours and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_compaction_metrics_are_scraped_and_move_with_traffic(
    metered: tuple[Services, str], pg_dsn: str
) -> None:
    services, url = metered
    async with httpx.AsyncClient() as http:
        before = (await http.get(url)).text
        db = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=2)
        try:
            async with client(services) as c:
                session = await new_session(
                    c,
                    context_policy={
                        "recent_complete_groups": 1,
                        "compaction": {"user_turns": 2},
                    },
                )
                first = await question(c, session, "a", rounds=2)
                await c.finish_run(first)
                run = await question(c, session, "b")
                await c.prepare(run)
            (job,) = await settled(db, session["session_id"])
            assert job["status"] == "committed"
        finally:
            await db.close()
        await _junk_request(services)  # an unreadable request: dead-lettered
        group = services.env("ALC_COMPACTION_GROUP")
        after = await _scrape_until(http, url, group)
    jobs = "agentloom_compaction_jobs_total"
    assert (
        _sample(after, jobs, outcome="succeeded") >= _sample(before, jobs, outcome="succeeded") + 1
    )
    seconds = "agentloom_compaction_job_seconds_count"
    assert _sample(after, seconds) >= _sample(before, seconds) + 1
    calls = "agentloom_summarizer_calls_total"
    assert _sample(after, calls, outcome="ok") > _sample(before, calls, outcome="ok")
    tokens = "agentloom_summarizer_tokens_total"
    for direction in ("input", "output"):
        assert _sample(after, tokens, direction=direction) > _sample(
            before, tokens, direction=direction
        )
    dead = "agentloom_dead_letters_total"
    assert (
        _sample(after, dead, reason="bad_header") >= _sample(before, dead, reason="bad_header") + 1
    )
    # The lag of the partitions that carried requests: reported, and caught up.
    assert all(v == 0 for v in _lag(after, group).values())


def _lag(text: str, group: str) -> dict[str, float]:
    prefix = f'agentloom_consumer_lag{{group="{group}",partition="'
    return {
        line[len(prefix) :].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


async def _junk_request(services: Services) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=services.env("ALC_KAFKA_BOOTSTRAP"), **auth())
    await producer.start()
    try:
        topic = services.env("ALC_TOPIC_COMPACTION_REQUESTS")
        await producer.send_and_wait(topic, b"\x00junk", key=b"ses_junk")
    finally:
        await producer.stop()


async def _scrape_until(http: httpx.AsyncClient, url: str, group: str) -> str:
    """The scrape once the junk request is dead-lettered and every reported partition
    is caught up (committed after its outcome), within 30 s."""
    text = ""
    for _ in range(300):
        text = (await http.get(url)).text
        lag = _lag(text, group)
        dead = _sample(text, "agentloom_dead_letters_total", reason="bad_header")
        if dead and lag and not any(lag.values()):
            return text
        await asyncio.sleep(0.1)
    return text  # the assertions say what is missing
