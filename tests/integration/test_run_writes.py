"""A batch's runs are written in two statements whatever their number (issue 37): the new
runs with their snapshots, then the changes — the last change of a run being its state
after the batch (R1.2, R1.3)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

from domain.planning.batch import plan_batch
from domain.planning.state import BatchPlan, Incoming, NewRun, RunChange
from domain.record_rows import RECORD_COLUMNS
from schemas.contracts import RecordKind
from storage.records import batch_sql, ingest, session_states
from storage.records.offsets import NOTIFY_CHANNEL, committed_offsets, read_commit_note
from tests.support.flows import client, new_session
from tests.support.services import Services
from tests.unit.factories import make_event

pytestmark = pytest.mark.integration


@pytest.mark.spec("R1.2", "R1.3")
async def test_a_batchs_new_runs_and_their_changes_are_written_as_planned(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        sid = (await new_session(c))["session_id"]
    plan = BatchPlan()
    plan.new_runs = [
        NewRun(sid, f"batch-run-{i}", f"batch-run-{i}.main", 10 * i, 10 * i + 1, "p", i, 2 * i)
        for i in range(3)
    ]
    plan.run_changes = [
        RunChange(sid, "batch-run-0", "finished", 0, 1, 0),
        RunChange(sid, "batch-run-1", "finished", 0, 1, 0),
        RunChange(sid, "batch-run-1", "active", 1, 1, 0),  # resumed in the same batch
        RunChange(sid, "batch-run-1", "finished", 1, 2, 0),
    ]
    async with db.acquire() as conn, conn.transaction():
        await batch_sql.write_runs(conn, plan)
    rows = await db.fetch(
        "SELECT u.run_id, u.main_instance_id, u.status, u.resumes, u.ends, u.started_sequence,"
        " u.ended_at IS NOT NULL AS ended, x.through_session_sequence, x.user_turns,"
        " x.model_steps FROM runs u JOIN history_snapshots x USING (snapshot_id)"
        " WHERE u.session_id = $1 AND u.run_id LIKE 'batch-run-%' ORDER BY u.run_id",
        sid,
    )
    assert [tuple(r) for r in rows] == [
        ("batch-run-0", "batch-run-0.main", "finished", 0, 1, 1, True, 0, 0, 0),
        ("batch-run-1", "batch-run-1.main", "finished", 1, 2, 11, True, 10, 1, 2),
        ("batch-run-2", "batch-run-2.main", "active", 0, 0, 21, False, 20, 2, 4),
    ]
    # A later batch resumes the finished run 0 and finishes it again: a new end (its last
    # change's status is the one it had, but the batch reopened it); a refused resume of
    # run 1 changes only its counters.
    ended = "SELECT ended_at FROM runs WHERE session_id = $1 AND run_id = $2"
    before = {r: await db.fetchval(ended, sid, r) for r in ("batch-run-0", "batch-run-1")}
    later = BatchPlan()
    later.run_changes = [
        RunChange(sid, "batch-run-0", "active", 1, 1, 0),
        RunChange(sid, "batch-run-0", "finished", 1, 2, 0),
        RunChange(sid, "batch-run-1", "finished", 1, 2, 1),
    ]
    async with db.acquire() as conn, conn.transaction():
        await batch_sql.write_runs(conn, later)
    assert await db.fetchval(ended, sid, "batch-run-0") > before["batch-run-0"]
    assert await db.fetchval(ended, sid, "batch-run-1") == before["batch-run-1"]


async def test_the_record_types_are_the_columns_of_records(db: asyncpg.Pool) -> None:
    rows = await db.fetch(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type FROM pg_attribute a"
        " WHERE a.attrelid = 'records'::regclass AND a.attnum > 0 AND NOT a.attisdropped"
    )
    types = {r["attname"]: r["type"] for r in rows}
    assert {c: types[c] for c in RECORD_COLUMNS} == batch_sql.RECORD_TYPES
    assert set(RECORD_COLUMNS) == set(types) - {"committed_at"}  # its default: now()


@pytest.mark.spec("R3.1", "R3.2")
async def test_a_batch_of_records_writes_the_same_rows_in_one_statement_as_by_copy(
    services: Services, db: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small batch's records go with its threads and sessions in one statement, a large
    one's by COPY (``ingest.COPY_FROM``): the same rows either way."""
    sid, run, scope = await _a_committed_run(services)
    events = [
        make_event(RecordKind.USER_INPUT, f"w-{i}", text=f"q {i}", **scope) for i in range(3)
    ] + [make_event(RecordKind.TOOL_CALL, "w-call", operation_id="op-1", **scope)]
    chunk = [Incoming(ev, 0, i, 3, "tiktoken:cl100k_base") for i, ev in enumerate(events)]

    async def written(copy_from: int) -> list[tuple[object, ...]]:
        monkeypatch.setattr(ingest, "COPY_FROM", copy_from)
        async with db.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                keys = {sid: {ev.event_key for ev in events}}
                scopes = {sid: {(run.run_id, run.instance_id)}}
                states, _ = await session_states.load_states(conn, keys, {}, scopes)
                plan = plan_batch(chunk, states)
                await ingest.write_plan(conn, plan, states, "c", "t", {})
                rows = await conn.fetch(
                    f"SELECT {', '.join(RECORD_COLUMNS)} FROM records"
                    " WHERE session_id = $1 AND event_key LIKE 'w-%' ORDER BY session_sequence",
                    sid,
                )
                threads = await conn.fetch("SELECT * FROM threads WHERE session_id = $1", sid)
                seq = await conn.fetchval(
                    "SELECT next_session_sequence FROM sessions WHERE session_id = $1", sid
                )
                return [tuple(r) for r in rows] + [tuple(t) for t in threads] + [(seq,)]
            finally:
                await tx.rollback()

    by_statement, by_copy = await written(64), await written(0)
    assert len(by_statement) == len(events) + 2 and by_statement == by_copy


@pytest.mark.spec("R15.2")
async def test_a_batchs_tracking_rows_and_notification_go_with_its_records(
    services: Services, db: asyncpg.Pool, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consumer offsets (the "consumed" mark) and the notification that wakes Prepare's
    waiters are written by the statement of a batch's records, by COPY or not, and alone
    when the batch writes nothing: the offsets only grow, one notification a commit."""
    sid, run, scope = await _a_committed_run(services)
    consumer, topic = f"tracked-{uuid.uuid4().hex[:8]}", "ctx.records"
    notes: list[dict[int, int]] = []  # ours (the services' processor notifies too)

    def heard(*args: Any) -> None:
        note = read_commit_note(args[3], consumer, topic)
        if note is not None:
            notes.append(note)

    listener = await asyncpg.connect(pg_dsn)
    await listener.add_listener(NOTIFY_CHANNEL, heard)

    async def batch(
        keys: list[str], offsets: dict[int, int], copy_from: int = 64, events: Sequence[Any] = ()
    ) -> int:
        """Write a batch of ``events`` and user inputs ``keys``; the statements
        ``write_plan`` sent."""
        monkeypatch.setattr(ingest, "COPY_FROM", copy_from)
        events = [*events, *(make_event(RecordKind.USER_INPUT, k, text=k, **scope) for k in keys)]
        chunk = [Incoming(ev, 0, i, 3, "tiktoken:cl100k_base") for i, ev in enumerate(events)]
        runs = {(e.scope.run_id, e.scope.instance_id) for e in events}
        async with db.acquire() as conn, conn.transaction():
            states, _ = await session_states.load_states(
                conn, {sid: {e.event_key for e in events}}, {}, {sid: runs}
            )
            counted = _Counting(conn)
            plan = plan_batch(chunk, states)
            assert not plan.rejections, plan.rejections
            await ingest.write_plan(counted, plan, states, consumer, topic, offsets)  # type: ignore[arg-type]
            return counted.statements

    try:
        assert await batch(["t-1", "t-2"], {0: 5, 1: 7}) == 1  # in the records' statement
        assert await batch(["t-3"], {0: 9}, copy_from=0) == 2  # the COPY, then the rest
        assert await batch([], {1: 6}) == 1  # nothing to write but the offsets (6 < 7)
        # A run finished, the next one started, its question: all in the one statement.
        nxt = {**scope, "run": "tracked-next", "instance": "tracked-next.main"}
        turn = [
            make_event(RecordKind.RUN_FINISHED, f"run_finished:{run.run_id}", **scope),
            make_event(RecordKind.RUN_STARTED, "run_started:tracked-next", **nxt),
            make_event(RecordKind.USER_INPUT, "t-4", text="t-4", **nxt),
        ]
        assert await batch([], {0: 12}, events=turn) == 1
        for _ in range(100):  # each notification comes with its commit
            if len(notes) == 4:
                break
            await asyncio.sleep(0.05)
    finally:
        await listener.close()
    assert await committed_offsets(db, consumer, topic) == {0: 12, 1: 7}
    assert notes == [{0: 5, 1: 7}, {0: 9}, {1: 6}, {0: 12}]
    written = await db.fetchval(
        "SELECT count(*) FROM records WHERE session_id = $1 AND event_key LIKE 't-%'", sid
    )
    assert written == 4
    statuses = await db.fetch(
        "SELECT run_id, status FROM runs WHERE session_id = $1 ORDER BY run_id", sid
    )
    assert {r["run_id"]: r["status"] for r in statuses} == {
        run.run_id: "finished",
        "tracked-next": "active",
    }


async def _a_committed_run(services: Services) -> tuple[str, Any, dict[str, Any]]:
    """A new session's run, committed: its session id, its handle and ``make_event``'s
    scope arguments for its main thread."""
    async with client(services) as c:
        session = await new_session(c)
        run = await c.start_run(session)
        await c.prepare(run)  # the run is committed
    sid = session["session_id"]
    scope = {"space": run.space_id, "actor": run.actor_id, "session": sid, "run": run.run_id}
    return sid, run, {**scope, "instance": run.instance_id}


class _Counting:
    """A connection that counts the statements sent through it (COPY included)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn, self.statements = conn, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return await self.conn.execute(*args, **kwargs)

    async def copy_records_to_table(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return await self.conn.copy_records_to_table(*args, **kwargs)
