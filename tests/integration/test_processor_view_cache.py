"""The processor's main views kept between batches (issue 37,
``storage.compaction.view_cache``) on a real session: the view its store gives — read or
kept — is the one a fresh read gives, after each kind of commit another processor makes
(as after a rebalance or a restart: a record that keeps the view's facts, a resource's
revocation, a new run), and a view is used again, unread, only while nothing moved its
stamp (R2.6, R2.7, R11.8, R15.3)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from services.sdk.client import ContextClient, RunHandle
from storage.compaction import view_cache
from storage.compaction.view_cache import ViewCache
from storage.compaction.view_state import ViewState, load_view_state
from storage.processor_store import PgProcessingStore
from tests.support.flows import client, new_session, wait_committed
from tests.support.services import Services

pytestmark = pytest.mark.integration


async def _observed(db: asyncpg.Pool, sid: str) -> None:
    """Until the session's first budget observation is applied; then it is a candidate
    of the pre-emptive check (no attempt remembered)."""
    for _ in range(400):
        if await db.fetchval("SELECT count(*) FROM trigger_reports WHERE session_id=$1", sid):
            break
        await asyncio.sleep(0.05)
    await db.execute(
        "UPDATE compaction_state SET last_attempt = NULL WHERE session_id=$1 AND lineage='main'",
        sid,
    )


async def _views(db: asyncpg.Pool, cache: ViewCache, sid: str) -> tuple[ViewState, ViewState]:
    """The candidate's main view through the processor's store with ``cache``, and a fresh
    read, in one batch transaction (repeatable read: both of one state)."""
    async with db.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        store = PgProcessingStore(conn, cache=cache)
        async with store.transaction():
            (candidate,) = await store.preempt_candidates([sid])
            kept = await store.main_view(sid, candidate.run_id)
        fresh = await load_view_state(conn, sid, candidate.run_id)
    assert fresh is not None
    return kept, fresh


async def _committed(db: asyncpg.Pool, services: Services, sent: tuple[int, int]) -> None:
    await wait_committed(db, services, {sent[0]: sent[1]})


@pytest.mark.spec("R2.6", "R2.7", "R11.8", "R15.3")
async def test_the_kept_view_is_a_fresh_read_after_every_kind_of_commit(
    services: Services, db: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    read = view_cache.view_of

    async def counted(conn: asyncpg.Connection, sid: str, run: str, lineage: str) -> ViewState:
        reads.append(run)
        return await read(conn, sid, run, lineage)

    monkeypatch.setattr(view_cache, "view_of", counted)
    cache = ViewCache()
    async with client(services) as c:
        session = await new_session(c)
        sid = session["session_id"]
        run = await c.start_run(session)
        await c.append_user(run, "What does the contract say?", "vc-q")
        await c.prepare(run)
        await _observed(db, sid)

        async def check(read_again: bool) -> ViewState:
            before = len(reads)
            kept, fresh = await _views(db, cache, sid)
            assert kept == fresh
            assert len(reads) == before + read_again
            return kept

        await check(read_again=True)
        first = await check(read_again=False)  # nothing moved: kept, not read
        await _committed(db, services, await _tool_round(c, run, "vc-1"))
        grown = await check(read_again=True)  # records of another processor
        assert grown.counters.model_steps == first.counters.model_steps + 1
        await check(read_again=False)
        await _committed(db, services, await c.revoke_resource(run, "document", "doc", "1"))
        revoked = await check(read_again=True)
        assert revoked.revocation_epoch != first.revocation_epoch
        await c.finish_run(run)
        second = await c.start_run(session)
        await c.append_user(second, "And the fee?", "vc-q2")
        await c.prepare(second)
        await _observed(db, sid)
        moved = await check(read_again=True)
        assert moved.run_id == second.run_id != first.run_id
        await check(read_again=False)


async def _tool_round(c: ContextClient, run: RunHandle, tag: str) -> tuple[int, int]:
    await c.append_model_result(run, "Reading it.", f"{tag}-m", [(f"{tag}-c", "read_file", "{}")])
    return await c.append_tool_outcome(run, f"{tag}-c", "read_file", "the fee is 42")
