"""The processor's pre-emptive check reads a run's main view (issue 37): the inherited
records its summary leaves shown are kept between checks and continued from where they
end — the same records as a read of the whole history, under a summary covering as
much or more, at a later boundary; anything else (another revocation epoch, a summary
covering less) is read again. Each check read the session's whole history before (~2-3
ms at 1,400 records, at every compaction)."""

from __future__ import annotations

import random

import asyncpg
import pytest

from domain.context.rendering import RecordView
from schemas.contracts import RecordKind
from storage.compaction.view_cache import ViewCache
from storage.processor_store import PgProcessingStore
from storage.records import threads
from storage.records.threads import run_snapshot, thread_records
from tests.integration.test_long_sessions import step
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration


@pytest.mark.spec("R2.2", "R2.3", "R11.1")
async def test_a_checks_view_continues_the_inherited_records_of_the_last_check(
    services: Services, db: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with client(services) as c:
        session = await new_session(c)
        sid = session["session_id"]
        runs = []
        for q in range(6):
            run = await c.start_run(session)
            runs.append(run)
            await c.append_user(run, f"question {q}", f"q{q}")
            await step(c, run, db, f"r{q}")
            await c.finish_run(run)
    rng = random.Random(5)
    cache = ViewCache()
    covered: set[str] = set()
    whole_reads: list[int] = []
    read_whole = threads.uncovered_records

    async def counted(conn: asyncpg.Connection, *args: object) -> list[RecordView]:
        whole_reads.append(1)
        return await read_whole(conn, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(threads, "uncovered_records", counted)
    async with db.acquire() as conn:
        snaps = [await run_snapshot(conn, sid, r.run_id) for r in runs]
        # (run, epoch, whether its summary covers less than the last one, read whole)
        cases = [(1, "e1", False, True)] + [(i, "e1", False, False) for i in range(2, 6)]
        cases += [(5, "e1", True, True), (5, "e2", False, True), (5, "e2", False, False)]
        for i, epoch, less, whole in cases:
            snap = snaps[i]
            assert snap is not None
            through, run = snap.through_session_sequence, runs[i]
            history = await read_whole(conn, sid, through, frozenset())
            if less:  # a revoked summary's older one
                covered = set(sorted(covered)[: len(covered) // 2])
            else:
                covered |= {r.record_id for r in history if rng.random() < 0.5}
            store = PgProcessingStore(conn, cache=cache)
            before = len(whole_reads)
            async with store.transaction():
                found = await store.view_records(
                    sid, run.run_id, run.instance_id, through, frozenset(covered), epoch
                )
            assert (len(whole_reads) > before) == whole
            expected = await read_whole(conn, sid, through, frozenset(covered))
            expected += await thread_records(conn, sid, run.run_id, run.instance_id, through)
            assert found == expected
            kept = cache.uncovered[sid]
            assert (kept.through, kept.epoch, kept.covered) == (through, epoch, frozenset(covered))
        # A transaction that wrote the session's records keeps only what came before them.
        last = snaps[5]
        assert last is not None
        through = last.through_session_sequence
        store = PgProcessingStore(conn, cache=cache)
        async with store.transaction():
            assert store.views is not None
            store.views.wrote(sid, through - 2, str(RecordKind.USER_INPUT))
            await store.view_records(
                sid, runs[5].run_id, runs[5].instance_id, through, frozenset(covered), "e3"
            )
        kept = cache.uncovered[sid]
        assert kept.through == through - 3
        assert all(r.session_sequence <= through - 3 for r in kept.records)
