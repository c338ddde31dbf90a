"""kill -9 of the session processor in the middle of a stream loses and duplicates nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import asyncpg
import pytest

from tests.support.flows import (
    assert_whole,
    client,
    last_offsets,
    new_session,
    question_stream,
    wait_committed,
)
from tests.support.services import Services, start_services
from tests.support.stack import Stack

pytestmark = pytest.mark.integration

SESSIONS = 8
ROUNDS = 60  # each round: 1 question, 1 assistant with 2 calls, 2 results, 1 answer


DRIVERS = {
    "faust-in-process": {"ALC_PROCESSOR_OFFLOAD": "false"},
    "faust-consumer-thread": {"ALC_PROCESSOR_CONSUMER_THREAD": "true"},
    "aiokafka": {"ALC_PROCESSOR_DRIVER": "aiokafka"},
}


@pytest.fixture(scope="module", params=["faust", *DRIVERS])
def any_driver(
    request: pytest.FixtureRequest, services: Services, stack: Stack, pg_dsn: str
) -> Iterator[Services]:
    """Both processor drivers, and the faust one with its processor in process as well as
    in its child (ALC_PROCESSOR_OFFLOAD, the default) and with faust's consumer in its
    own thread as well as on the app's loop (the default), keep the same guarantees."""
    if request.param == "faust":
        yield services
        return
    other = start_services(stack, pg_dsn, **DRIVERS[request.param])
    yield other
    other.stop()


@pytest.mark.spec("R3.1", "R3.2", "R8.1", "R8.2", "R15.3")
async def test_processor_killed_mid_stream_loses_and_duplicates_nothing(
    any_driver: Services, db: asyncpg.Pool
) -> None:
    services = any_driver
    async with client(services) as c:
        sessions = [await new_session(c) for _ in range(SESSIONS)]
        runs = [await c.start_run(s) for s in sessions]
        stream = question_stream(runs, ROUNDS, "r")
        # Publish half, kill -9 the processor while it works through it, publish the
        # rest into the void, then restart.
        half = len(stream) // 2
        sent = await c.producer.send_many(stream[:half])
        await _until_some_committed(db, [s["session_id"] for s in sessions])
        services.processor.kill9()
        at_kill = await db.fetchval(
            "SELECT count(*) FROM records WHERE session_id = ANY($1::text[])",
            [s["session_id"] for s in sessions],
        )
        sent += await c.producer.send_many(stream[half:])
        # ...and the runtime retries some appends whose acks it never saw.
        sent += await c.producer.send_many(stream[half - 200 : half + 200])
        services.processor.start()
        await wait_committed(db, services, last_offsets(sent), timeout=120)

    per_session = 1 + ROUNDS * 5  # run_started + rounds
    assert 2 * SESSIONS < at_kill < SESSIONS * per_session  # the kill really was mid-stream
    await assert_whole(db, [s["session_id"] for s in sessions], ROUNDS)
    assert services.processor.starts >= 2


async def _until_some_committed(db: asyncpg.Pool, sids: list[str]) -> None:
    for _ in range(400):
        n = await db.fetchval(
            "SELECT count(*) FROM records WHERE session_id = ANY($1::text[])", sids
        )
        if n > 2 * SESSIONS:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("processor committed nothing before the kill")
