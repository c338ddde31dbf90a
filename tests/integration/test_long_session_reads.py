"""A long session's reads on the prepare path stay index reads (issue 37): a chat session
that has answered thousands of questions has thousands of runs, and every prepare and
every trigger check asks whether a run started after this one's snapshot (R2.6,
``storage.compaction.view_state``). With only the runs' (session, run) key that question
read every run of the session; ``runs_started`` (migration 028) answers it from an index
range. Checked on the real statement, with the planner's real statistics."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest

from services.sdk.client import RunHandle
from storage.compaction import state as compaction_state
from storage.compaction import view_state
from storage.records import frontier, threads
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration

EARLIER_RUNS = 3000
OTHER_SUMMARIES = 200


class _Captured:
    """Stands in for a connection: keeps the statement ``_main_row`` sends."""

    def __init__(self) -> None:
        self.sql = ""
        self.args: tuple[Any, ...] = ()

    async def fetchrow(self, sql: str, *args: Any) -> None:
        self.sql, self.args = sql, args


async def _run_row(db: asyncpg.Pool, session_id: str, run_id: str) -> asyncpg.Record:
    for _ in range(200):
        row = await db.fetchrow(
            "SELECT snapshot_id, started_sequence FROM runs WHERE session_id=$1 AND run_id=$2",
            session_id,
            run_id,
        )
        if row is not None:
            return row
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} was never committed")


async def _committed_run(services: Services, db: asyncpg.Pool) -> tuple[RunHandle, asyncpg.Record]:
    """A new session's run, and its row once the processor committed it."""
    async with client(services) as c:
        run = await c.start_run(await new_session(c))
    return run, await _run_row(db, run.session_id, run.run_id)


def _nodes(plan: Any) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan."""
    if isinstance(plan, list):
        return [n for v in plan for n in _nodes(v)]
    if not isinstance(plan, dict):
        return []
    own = [plan] if "Node Type" in plan else []
    return own + [n for v in plan.values() for n in _nodes(v)]


def _scans(plan: Any) -> list[tuple[str, str]]:
    """(node type, index or relation) of every scan in an EXPLAIN (FORMAT JSON) plan."""
    return [
        (n["Node Type"], n.get("Index Name") or n.get("Relation Name"))
        for n in _nodes(plan)
        if "Scan" in str(n["Node Type"])
    ]


def _literal(value: Any) -> str:
    if isinstance(value, list):  # an array of plain words: '{a,b}'
        value = "{" + ",".join(map(str, value)) + "}"
    return "NULL" if value is None else "'" + str(value).replace("'", "''") + "'"


async def _generic_plan(db: asyncpg.Pool, sql: str, args: tuple[Any, ...]) -> Any:
    """The plan of ``sql`` made for any arguments (as ``force_generic_plan`` makes it),
    explained at ``args``."""
    async with db.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        await conn.execute("PREPARE generic_probe AS " + sql)
        try:
            explained = ", ".join(map(_literal, args))
            text = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE generic_probe({explained})")
        finally:
            await conn.execute("DEALLOCATE generic_probe")
    return json.loads(text)


@pytest.mark.spec("R2.6")
async def test_whether_a_later_run_started_is_an_index_read_in_a_session_of_thousands_of_runs(
    services: Services, db: asyncpg.Pool
) -> None:
    run, row = await _committed_run(services, db)
    sid = run.session_id
    # The session's earlier questions: finished runs, all started before this one.
    await db.execute(
        "INSERT INTO runs (session_id, run_id, main_instance_id, status, snapshot_id,"
        " started_sequence) SELECT $1, 'earlier-' || g, 'main-' || g, 'finished', $2, 0"
        " FROM generate_series(1, $3::int) g",
        sid,
        row["snapshot_id"],
        EARLIER_RUNS,
    )
    await db.execute("ANALYZE runs")
    captured = _Captured()
    through = int(row["started_sequence"])
    await view_state._main_row(captured, sid, run.run_id, through, view_state.CHAIN_DEPTH)  # type: ignore[arg-type]
    plan = json.loads(await db.fetchval("EXPLAIN (FORMAT JSON) " + captured.sql, *captured.args))
    on_runs = [s for s in _scans(plan) if s[1] in ("runs", "runs_pkey", "runs_started")]
    # The question reads ``runs_started``; a run looked up by its key (the newest
    # summary's reuse reads its records' runs) is no scan of the session's runs.
    started = [s for s in on_runs if s[1] != "runs_pkey"]
    assert started in (
        [("Index Scan", "runs_started")],
        [("Index Only Scan", "runs_started")],
    ), on_runs
    # The services plan it once per connection, for any arguments (pg_plan_cache_mode):
    # that plan reads an index too, never the whole table (as EXISTS it did).
    for scan in _scans(await _generic_plan(db, captured.sql, captured.args)):
        assert scan[1] != "runs", scan
    # And the answer is the same: no run started after this one's snapshot.
    async with db.acquire() as conn:
        state = await view_state.load_view_state(conn, sid, run.run_id)
    assert state is not None and not state.resumed


@pytest.mark.spec("R9.3")
async def test_whether_an_observation_was_checked_is_an_index_read_among_thousands_of_reports(
    services: Services, db: asyncpg.Pool
) -> None:
    """Every budget observation asks, under its lineage's lock, whether it was checked
    already (``storage.compaction.state``): its trigger report by event key. A session
    has a report per prepare; ``trigger_reports_event`` (migration 029) finds it without
    reading the others."""
    run, _ = await _committed_run(services, db)
    sid = run.session_id
    await db.execute(
        "INSERT INTO trigger_reports (session_id, lineage, run_id, event_key, fired, values,"
        " thresholds, decision, policy_revision, view_watermark, counters)"
        " SELECT $1, 'main', $2, 'observed-' || g, '{}', '{}', '{}', 'none', 'p', g, '{}'"
        " FROM generate_series(1, $3::int) g",
        sid,
        run.run_id,
        EARLIER_RUNS,
    )
    await db.execute("ANALYZE trigger_reports")
    plan = json.loads(
        await db.fetchval(
            "EXPLAIN (FORMAT JSON) " + compaction_state._LOCKED,
            sid,
            "main",
            "observed-7",
            EARLIER_RUNS // 2,
            run.run_id,
        )
    )
    on_reports = {s[1] for s in _scans(plan) if "trigger_reports" in (s[1] or "")}
    assert "trigger_reports_event" in on_reports, on_reports
    assert "trigger_reports_session" not in on_reports, on_reports


def _record_scans(plan: Any) -> list[tuple[str, str]]:
    """(index, index condition) of every index scan on ``records`` in an EXPLAIN plan."""
    return [
        (n["Index Name"], str(n.get("Index Cond", "")))
        for n in _nodes(plan)
        if str(n.get("Index Name", "")).startswith("records_")
    ]


@pytest.mark.spec("R11.6")
async def test_the_frontier_reads_each_kind_by_its_own_range_in_a_session_of_thousands_of_inputs(
    services: Services, db: asyncpg.Pool
) -> None:
    """Every prepare reads its thread's frontier (plan, constraints, task count). Among a
    long session's thousands of user inputs, ``records_frontier_kinds`` (migration 030)
    keeps the plan and the constraints reads to their own kinds' ranges."""
    run, _ = await _committed_run(services, db)
    sid = run.session_id
    await db.execute(
        "INSERT INTO records SELECT r.session_id, r.session_sequence + g,"
        " r.record_id || '-q' || g, r.event_key || '-q' || g, r.space_id, r.actor_id,"
        " r.run_id, r.instance_id, g, 'user_input', r.authority, r.visibility, NULL,"
        " 'question ' || g, NULL, r.content_sha256, r.content_length, r.media_type, '{}',"
        " 3, r.token_method, r.producer, r.occurred_at_ms, r.source_partition,"
        " r.source_offset, r.committed_at, NULL FROM records r, generate_series(1, $2::int) g"
        " WHERE r.session_id = $1 AND r.kind = 'run_started'",
        sid,
        EARLIER_RUNS,
    )
    await db.execute("ANALYZE records")
    sql = frontier.frontier_sql(child=False, inherit_constraints=True)
    plan = json.loads(
        await db.fetchval("EXPLAIN (FORMAT JSON) " + sql, sid, run.run_id, run.instance_id)
    )
    # (A constraint's "withdrawn" check reads the retractions index: not the session's.)
    scans = [s for s in _record_scans(plan) if s[0] != "records_retractions"]
    assert {name for name, _ in scans} == {"records_frontier_kinds"}, scans
    assert all("kind" in cond for _, cond in scans), scans
    # And the answer: no plan, no constraint, every input counted.
    async with db.acquire() as conn:
        found = await frontier.read_frontier(conn, sid, run.run_id, run.instance_id, child=False)
    assert found.task_version == EARLIER_RUNS, found
    assert found.plan.version == 0 and not found.constraints


@pytest.mark.spec("R2.6")
async def test_the_summary_chain_is_walked_by_key_among_other_sessions_summaries(
    services: Services, db: asyncpg.Pool
) -> None:
    """Every prepare and every trigger check reads its view's row, which walks the
    lineage's summary chain back from the current summary (``view_state._chain``). Each
    step of the walk is one lookup by key, in the plan made for these arguments and in
    the one made for any, whatever join the planner prefers: never a scan of every
    session's summaries (it hashed the walk's join over one while the table was small)."""
    run, row = await _committed_run(services, db)
    sid = run.session_id
    through = int(row["started_sequence"])
    columns = (
        "summary_id, session_id, lineage, parent_summary_id, job_id, view_run_id,"
        " view_through, source_watermark, covered_ranges, covered_record_ids, summary,"
        " summary_text, summary_tokens, covered_tokens, policy_revision, trigger_reasons,"
        " observed_watermark, counter_baseline, budget_before, budget_after, target_reached"
    )
    values = (
        " $2, 0, 0, '[]', '{}', '{}', repeat('s', 800), 1, 1, 'p', '{}', 0, '{}', 1, 1, true"
        " FROM generate_series(1, $3::int) g"
    )
    # Another session's chain fills the table (a few hundred summaries of a few hundred
    # bytes: the size at which the planner chose the scan); this session's is 4 deep.
    await db.execute(
        f"INSERT INTO summary_revisions ({columns}) SELECT 'other-' || g || '-' || $1,"
        " 'other-' || $1, 'main', CASE WHEN g > 1 THEN 'other-' || (g - 1) || '-' || $1 END,"
        f" 'job-other-' || g || '-' || $1, {values}",
        sid,
        run.run_id,
        OTHER_SUMMARIES,
    )
    await db.execute(
        f"INSERT INTO summary_revisions ({columns}) SELECT 'own-' || g || '-' || $1, $1,"
        " 'main', CASE WHEN g > 1 THEN 'own-' || (g - 1) || '-' || $1 END,"
        f" 'job-own-' || g || '-' || $1, {values}",
        sid,
        run.run_id,
        4,
    )
    await db.execute(
        "INSERT INTO compaction_state (session_id, lineage, policy_revision, current_summary_id)"
        " VALUES ($1, 'main', 'p', 'own-4-' || $1) ON CONFLICT (session_id, lineage)"
        " DO UPDATE SET current_summary_id = excluded.current_summary_id",
        sid,
    )
    await db.execute("ANALYZE summary_revisions")
    captured = _Captured()
    await view_state._main_row(captured, sid, run.run_id, through, view_state.CHAIN_DEPTH)  # type: ignore[arg-type]
    async with db.acquire() as conn, conn.transaction():
        # The planner's own preference among joins, made for a small table whatever its
        # size here: the walk must not depend on it.
        await conn.execute("SET LOCAL enable_nestloop = off")
        hashed = json.loads(
            await conn.fetchval("EXPLAIN (FORMAT JSON) " + captured.sql, *captured.args)
        )
    custom = json.loads(await db.fetchval("EXPLAIN (FORMAT JSON) " + captured.sql, *captured.args))
    generic = await _generic_plan(db, captured.sql, captured.args)
    for plan in (hashed, custom, generic):
        scans = [s for s in _scans(plan) if "summary_revisions" in (s[1] or "")]
        assert scans and all(s == ("Index Scan", "summary_revisions_pkey") for s in scans), scans
    # And the walk: the newest CHAIN_DEPTH summaries, newest first, and more beyond them.
    got = await db.fetchrow(captured.sql, *captured.args)
    assert got is not None
    assert list(got["chain"]) == [f"own-{g}-{sid}" for g in (4, 3, 2)]
    assert got["more"] is True


def _unnest_parents(plan: Any) -> list[str]:
    """The node type above each scan of ``unnest`` in an EXPLAIN (FORMAT JSON) plan."""
    return [
        str(n["Node Type"])
        for n in _nodes(plan)
        for child in n.get("Plans", [])
        if child.get("Function Name") == "unnest"
    ]


@pytest.mark.spec("R2.2", "R2.3")
async def test_a_summarys_covered_ids_are_hashed_in_the_plan_made_for_any_arguments(
    services: Services, db: asyncpg.Pool
) -> None:
    """A view's inherited history marks the records its summary covers, among thousands
    of covered ids. Those reads are planned once per connection, for any arguments: the
    ids are hashed once (a Hash node over ``unnest``), never looked through for each
    record, whatever the number of ids the plan was made without knowing."""
    run, row = await _committed_run(services, db)
    sid = run.session_id
    ids = [f"covered-{g}" for g in range(EARLIER_RUNS)]
    args = (sid, int(row["started_sequence"]), ids)
    for sql in (threads._INHERITED, threads._INHERITED_SHOWN, threads._INHERITED_UNCOVERED):
        parents = _unnest_parents(await _generic_plan(db, sql, args))
        assert parents == ["Hash"], parents
