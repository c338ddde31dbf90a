"""A batch's sessions are locked and loaded in one statement (issue 37,
``storage.records.session_states``): the same facts as the separate reads, and read again
under the locks when another transaction committed to a session while its lock waited."""

from __future__ import annotations

import asyncio
import dataclasses

import asyncpg
import pytest

from storage.records import session_states
from storage.records.outcomes import RefusedEvent, write_scoped
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration


async def _run_with_records(services: Services) -> tuple[str, str, str, str]:
    """A session with a run whose question is committed: (session, run, main instance,
    the question's event key)."""
    async with client(services) as c:
        session = await new_session(c)
        run = await c.start_run(session)
        await c.append_user(run, "what is in the report?", "q-1")
        await c.prepare(run)  # waits for the append's commit
    return session["session_id"], run.run_id, run.instance_id, "q-1"


@pytest.mark.spec("R15.1", "R1.2")
async def test_the_one_statement_load_reads_what_the_separate_reads_do(
    services: Services, db: asyncpg.Pool
) -> None:
    sid, run_id, instance_id, key = await _run_with_records(services)
    keys = {sid: {key, "not-yet"}, "no-such-session": {"k"}}
    scopes = {sid: {(run_id, instance_id), ("no-such-run", None)}}
    async with db.acquire() as conn, conn.transaction():
        states, existing = await session_states.load_states(conn, keys, {}, scopes)
    async with db.acquire() as conn, conn.transaction():
        fresh = dataclasses.replace(states[sid], runs={}, threads={}, known_keys=set())
        again = {sid: fresh}
        await session_states._load_runs_and_threads(conn, again, scopes)
        known = await session_states._load_known(conn, again, keys, {})
    assert set(states) == {sid}
    assert states[sid].runs == again[sid].runs and run_id in states[sid].runs
    assert states[sid].threads == again[sid].threads and states[sid].threads
    assert states[sid].known_keys == again[sid].known_keys == {key}
    assert existing == known and existing[(sid, key)].kind == "user_input"


@pytest.mark.spec("R15.1", "R15.2")
async def test_a_session_committed_to_while_its_lock_waited_is_read_again_under_the_lock(
    services: Services, db: asyncpg.Pool
) -> None:
    """Another processor (a zombie of a rebalance) refuses a key of the session and
    commits while this batch waits for the session's lock: the batch must see that key
    as known, which the statement's own snapshot, taken before the wait, does not."""
    sid, run_id, instance_id, _ = await _run_with_records(services)
    space, actor = await db.fetchrow(
        "SELECT space_id, actor_id FROM sessions WHERE session_id=$1", sid
    )
    other = await db.acquire()
    mine = await db.acquire()
    try:
        tx = other.transaction()
        await tx.start()
        await other.execute("UPDATE sessions SET revision = revision + 1 WHERE session_id=$1", sid)
        await write_scoped(other, [RefusedEvent(sid, "late", "schema_invalid", "no", space, actor)])

        async def load() -> set[str]:
            async with mine.transaction():
                states, _ = await session_states.load_states(
                    mine, {sid: {"late"}}, {}, {sid: {(run_id, instance_id)}}
                )
                return states[sid].known_keys

        loading = asyncio.create_task(load())
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid=$1"
        pid = mine.get_server_pid()
        for _ in range(200):
            if await db.fetchval(waiting, pid):
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the load never waited for the session's lock")
        await tx.commit()
        assert await loading == {"late"}
    finally:
        await db.release(other)
        await db.release(mine)
