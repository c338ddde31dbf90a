"""The session processor's ``/metrics`` (SPEC R18, issue 12) through the real broker and
database: append→committed latency, batch size and time, consumer lag per partition and
dead letters by reason move with traffic."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.test_analytics import _sample, _traffic
from tests.support.flows import client
from tests.support.services import Services, free_port

pytestmark = [pytest.mark.integration, pytest.mark.spec("R18")]


@pytest.fixture(scope="module")
def metrics_url(services: Services) -> Iterator[str]:
    """The session's processor, restarted once with ``ALC_METRICS_PORT`` (its own copy of
    the environment: Prepare and the compaction service share the original dict)."""
    proc = services.processor
    original = proc.env
    port = free_port()
    proc.stop()
    proc.env = {**original, "ALC_METRICS_PORT": str(port)}
    proc.start()
    yield f"http://127.0.0.1:{port}/metrics"
    proc.stop()
    proc.env = original
    proc.start()


async def _scrape(url: str) -> str:
    async with httpx.AsyncClient() as http:
        r = await http.get(url)
        assert r.status_code == 200
        return r.text


async def test_processor_metrics_move_with_traffic(services: Services, metrics_url: str) -> None:
    before = await _scrape(metrics_url)
    async with client(services) as c:
        await _traffic(c, questions=2)  # ends with an append to an ended run: dead letter
    group = services.env("ALC_PROCESSOR_ID")
    after = await _scrape(metrics_url)
    for _ in range(150):  # the dead letter is written after the last prepare answered
        if _sample(after, "agentloom_dead_letters_total", reason="run_not_active") >= 1:
            break
        await asyncio.sleep(0.2)
        after = await _scrape(metrics_url)
    assert _sample(after, "agentloom_dead_letters_total", reason="run_not_active") >= 1
    # Two runs, each: start, user input, model result, tool outcome, finish.
    for name in (
        "agentloom_append_committed_seconds_count",
        "agentloom_processor_batch_size_sum",
    ):
        assert _sample(after, name) >= _sample(before, name) + 10, name
    assert _sample(after, "agentloom_processor_batch_seconds_count") > _sample(
        before, "agentloom_processor_batch_seconds_count"
    )
    lag = [
        line
        for line in after.splitlines()
        if line.startswith("agentloom_consumer_lag{") and f'group="{group}"' in line
    ]
    assert lag, "no consumer lag series for the processor's group"
    assert all(float(line.rsplit(" ", 1)[1]) >= 0 for line in lag)
