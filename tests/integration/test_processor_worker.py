"""The faust driver's processor child (streams.drivers.worker, issue 13) on the real stack:
whichever of the two processes dies, nothing is lost or applied twice, and no child goes
on writing for a parent that is gone (the single writer of a partition, R8.1)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import asyncpg
import pytest

from schemas.contracts import ToolStatus
from streams.crash_only import CRASH_EXIT_CODE
from tests.support import events as ev
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

SESSIONS = 6
ROUNDS = 50


def _workers_of(pid: int) -> list[int]:
    """Live ``streams.drivers.worker`` children of ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if ppid == pid and b"streams.drivers.worker" in cmd:
            out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def _worker(services: Services) -> int:
    assert services.processor.popen is not None
    for _ in range(500):
        found = _workers_of(services.processor.popen.pid)
        if found:
            assert len(found) == 1
            return found[0]
        await asyncio.sleep(0.01)
    raise AssertionError("the faust driver runs no processor worker")


async def _counts(db: asyncpg.Pool, sids: list[str]) -> int:
    return int(
        await db.fetchval("SELECT count(*) FROM records WHERE session_id = ANY($1::text[])", sids)
    )


@pytest.mark.spec("R3.1", "R3.2", "R8.1", "R8.2", "R15.3")
async def test_a_killed_worker_ends_its_parent_and_the_restart_loses_and_duplicates_nothing(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        sessions = [await new_session(c) for _ in range(SESSIONS)]
        sids = [s["session_id"] for s in sessions]
        runs = [await c.start_run(s) for s in sessions]
        stream = question_stream(runs, ROUNDS, "w")
        half = len(stream) // 2
        sent = await c.producer.send_many(stream[:half])
        worker = await _worker(services)
        for _ in range(500):
            if await _counts(db, sids) > 2 * SESSIONS:
                break
            await asyncio.sleep(0.01)
        os.kill(worker, signal.SIGKILL)
        popen = services.processor.popen
        assert popen is not None
        # Crash-only: the faust process ends at once, before it could ack the batch.
        assert await asyncio.to_thread(popen.wait, 30) == CRASH_EXIT_CODE
        at_kill = await _counts(db, sids)
        sent += await c.producer.send_many(stream[half:])
        services.processor.start()
        await wait_committed(db, services, last_offsets(sent), timeout=120)
    assert at_kill < SESSIONS * (1 + ROUNDS * 5)  # the kill really was mid-stream
    await assert_whole(db, sids, ROUNDS)


@pytest.mark.spec("R8.1")
async def test_a_killed_processor_takes_its_worker_with_it(
    services: Services, db: asyncpg.Pool
) -> None:
    """kill -9 of the faust process (no chance to clean up): its child dies too
    (PR_SET_PDEATHSIG) instead of writing on for partitions the group hands elsewhere."""
    async with client(services) as c:
        run = await c.start_run(await new_session(c))
        sent = await c.producer.send_many(ev.question_round(run, "k", (ToolStatus.OK,)))
        worker = await _worker(services)
        services.processor.kill9()
        deadline = time.monotonic() + 5
        while _alive(worker) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert not _alive(worker), "the worker outlived its killed parent"
        services.processor.start()
        last: dict[int, int] = {}
        for p, o in sent:
            last[p] = max(last.get(p, -1), o)
        await wait_committed(db, services, last, timeout=60)


@pytest.mark.spec("R8.1")
async def test_a_killed_worker_ends_its_parent_even_while_every_batch_is_applied_there(
    stack: Stack, pg_dsn: str, db: asyncpg.Pool
) -> None:
    """With every batch small enough to be applied in the faust process
    (``ALC_PROCESSOR_OFFLOAD_FROM``, ``streams.drivers.small_at_home``), no batch would
    meet the dead child: the parent ends when the child's pipe closes, and the restart
    applies everything once."""
    # (in a thread: starting runs a private event loop beside this test's)
    services = await asyncio.to_thread(
        start_services, stack, pg_dsn, ALC_PROCESSOR_OFFLOAD_FROM="1000000"
    )
    try:
        async with client(services) as c:
            run = await c.start_run(await new_session(c))
            sent = await c.producer.send_many(ev.question_round(run, "h", (ToolStatus.OK,)))
            worker = await _worker(services)
            popen = services.processor.popen
            assert popen is not None
            os.kill(worker, signal.SIGKILL)
            assert await asyncio.to_thread(popen.wait, 30) == CRASH_EXIT_CODE
            services.processor.start()
            last: dict[int, int] = {}
            for p, o in sent:
                last[p] = max(last.get(p, -1), o)
            await wait_committed(db, services, last, timeout=60)
    finally:
        await asyncio.to_thread(services.stop)
