"""The faust processor's consumer on the app's loop (``streams.drivers.in_loop``): two
processors of one group, one joining mid-stream and one killed mid-stream, move
partitions between them and lose or apply twice nothing; and where the consumer runs
with ``ALC_PROCESSOR_CONSUMER_THREAD`` off and on."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from devstack.launcher import PROCESSOR_READY, Proc
from streams.drivers.app import create_app
from tests.support.flows import (
    assert_whole,
    client,
    last_offsets,
    new_session,
    question_stream,
    wait_committed,
)
from tests.support.services import LOG_DIR, Services, settings_of, start_services
from tests.support.stack import REPO, Stack

pytestmark = pytest.mark.integration

SESSIONS = 8  # over the 4 partitions: each processor gets some
ROUNDS = 30  # each round: 1 question, 1 assistant with 2 calls, 2 results, 1 answer


@pytest.fixture(scope="module")
def pair(stack: Stack, pg_dsn: str) -> Iterator[tuple[Services, Proc]]:
    """Services of their own (own topics and group: the other tests' processor is not
    rebalanced) and a second processor of the same group, not started."""
    services = start_services(stack, pg_dsn)
    env = {**os.environ, **services.settings_env, "PYTHONUNBUFFERED": "1"}
    env["ALC_PROCESSOR_INSTANCE_ID"] = services.env("ALC_PROCESSOR_INSTANCE_ID") + "-b"
    second = Proc(
        "processor-b",
        [sys.executable, "-m", "streams"],
        env,
        LOG_DIR / services.env("ALC_PROCESSOR_ID"),
        cwd=REPO,
        ready_line=PROCESSOR_READY,
    )
    try:
        yield services, second
    finally:
        second.stop()
        services.stop()


@pytest.mark.spec("R3.1", "R3.2", "R15.3")
async def test_a_processor_joining_and_one_killed_mid_stream_lose_and_duplicate_nothing(
    pair: tuple[Services, Proc], db: asyncpg.Pool
) -> None:
    services, second = pair
    async with client(services) as c:
        sessions = [await new_session(c) for _ in range(SESSIONS)]
        runs = [await c.start_run(s) for s in sessions]
        stream = question_stream(runs, ROUNDS, "r")
        third = len(stream) // 3
        sent = await c.producer.send_many(stream[:third])
        # A second member joins while the first works: the first's partitions are
        # revoked, the group's split between the two.
        await asyncio.to_thread(second.start)
        sent += await c.producer.send_many(stream[third : 2 * third])
        await wait_committed(db, services, last_offsets(sent), timeout=120)
        # The first dies; once the broker expels it (its session timeout: a static
        # member's partitions wait for it that long), the second takes them all.
        services.processor.kill9()
        sent += await c.producer.send_many(stream[2 * third :])
        await wait_committed(db, services, last_offsets(sent), timeout=120)

    await assert_whole(db, [s["session_id"] for s in sessions], ROUNDS)
    assert second.popen is not None and second.popen.poll() is None  # it did the last third


async def _nothing(app: object) -> object:
    raise AssertionError("no batch is built here")


@pytest.mark.parametrize("threaded", [False, True])
async def test_the_consumers_calls_run_on_the_apps_loop_unless_its_thread_is_asked_for(
    services: Services, tmp_path: Path, threaded: bool
) -> None:
    """``ALC_PROCESSOR_CONSUMER_THREAD``: the consumer, started against the real broker,
    runs what the app asks of it (fetches, commits) on the app's own loop and thread,
    or with the setting on faust's thread and loop of its own."""
    settings = settings_of(services.settings_env).model_copy(
        update={"processor_consumer_thread": threaded}
    )
    app = create_app(settings, tmp_path, _nothing)  # type: ignore[arg-type]
    consumer = app.consumer._thread  # type: ignore[attr-defined]

    async def where() -> tuple[int, asyncio.AbstractEventLoop]:
        return threading.get_ident(), asyncio.get_running_loop()

    await asyncio.wait_for(consumer.start(), 30)
    try:
        ident, loop = await asyncio.wait_for(consumer.call_thread(where), 30)
    finally:
        await asyncio.wait_for(consumer.stop(), 30)
    here = (threading.get_ident(), asyncio.get_running_loop())
    assert ((ident, loop) == here) is not threaded
