"""Reading a thread's execution frontier: its current plan, the constraints in
force and the task version, folded by ``domain.frontier`` from their own records.

Prepare reads it for every action context (R4.4) and the session processor at a summary
commit (R11.6); both read the same records, so the versions they compare are the same.
A thread is the session's main thread (records of no instance or of their run's main
instance) or a child instance (``run_id`` + ``instance_id``, R13.1): a child has a plan
of its own and sees the main thread's constraints when its policy inherits them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import asyncpg
from pydantic import JsonValue

from domain.frontier import (
    CONSTRAINT_RETIRED,
    CONSTRAINT_SET,
    PLAN_UPDATED,
    Frontier,
    FrontierRecord,
    active_constraints,
    declared_texts,
    plan_of,
)
from domain.planning.state import SessionState

_FROM = (
    " FROM records r LEFT JOIN runs u ON u.session_id = r.session_id AND u.run_id = r.run_id"
    " WHERE r.session_id = $1"
)
# Run $2's snapshot boundary: the last session sequence its history inherits.
_THROUGH = (
    "(SELECT x.through_session_sequence FROM runs v"
    " JOIN history_snapshots x USING (snapshot_id) WHERE v.session_id = $1 AND v.run_id = $2)"
)
# The main thread as run $2 sees it (R2.1, R2.5): what its snapshot inherits (main
# instances, session or actor visibility, up to the snapshot), its own records, and what
# was declared for the session outside any run.
_MAIN = (
    "((r.instance_id IS NULL OR r.instance_id = u.main_instance_id)"
    " AND (r.run_id IS NULL OR r.run_id = $2 OR (r.visibility IN ('session', 'actor')"
    f" AND r.session_sequence <= {_THROUGH})))"
)
# What ``_MAIN`` holds through the run's snapshot, whatever the run (none of its own
# records is that early): the session's inherited history, the same for every run whose
# snapshot is at or past a sequence.
_INHERITED = (
    "((r.instance_id IS NULL OR r.instance_id = u.main_instance_id)"
    " AND (r.run_id IS NULL OR r.visibility IN ('session', 'actor')))"
)
_CHILD = "(r.run_id = $2 AND r.instance_id = $3)"
# A session's constraints are the session's, whichever run set or retired them: a resumed
# run is bound by a rule retired or set since its snapshot (the plan is its own history).
_SESSION_RULES = (
    "((r.instance_id IS NULL OR r.instance_id = u.main_instance_id)"
    " AND (r.run_id IS NULL OR r.run_id = $2 OR r.visibility IN ('session', 'actor')))"
)
# A constraint declared with a user input that was since retracted is withdrawn.
_WITHDRAWN = (
    f"(r.kind = '{CONSTRAINT_SET}' AND EXISTS (SELECT 1 FROM records rx"
    " WHERE rx.session_id = r.session_id AND rx.kind = 'record_retracted'"
    " AND rx.operation_id = r.payload->>'source_record_id'))"
)
_COLS = (
    "r.record_id, r.session_sequence, r.kind, r.run_id, r.content_inline, r.payload,"
    f" {_WITHDRAWN} AS withdrawn"
)
_CONSTRAINT_KINDS = f"r.kind IN ('{CONSTRAINT_SET}', '{CONSTRAINT_RETIRED}')"


def _payload(raw: Any) -> dict[str, JsonValue]:
    """The record's payload (its kind's JSON, as the event carried it)."""
    value = json.loads(raw) if isinstance(raw, str) else raw
    return dict(value or {})


def _record(r: Mapping[str, Any]) -> FrontierRecord:
    return FrontierRecord(
        r["record_id"],
        r["session_sequence"],
        r["kind"],
        r["run_id"],
        r["content_inline"] or "",
        _payload(r["payload"]),
        bool(r["withdrawn"]),
    )


def _where(child: bool, inherit_constraints: bool) -> tuple[str, str]:
    """The thread's records, and where its constraints come from."""
    if not child:
        return _MAIN, _SESSION_RULES
    return _CHILD, f"({_SESSION_RULES} OR {_CHILD})" if inherit_constraints else _CHILD


async def read_frontier(
    conn: asyncpg.Connection,
    session_id: str,
    run_id: str,
    instance_id: str,
    *,
    child: bool,
    inherit_constraints: bool = True,
    tasks: bool = True,
) -> Frontier:
    """The frontier of the thread ``(run_id, instance_id)`` as committed now, in one round
    trip (it is read at every prepare). Without ``tasks``, its task version is not
    counted (0): a reader of the plan and constraints alone does not count the thread's
    every input."""
    rows = await conn.fetch(
        frontier_sql(child, inherit_constraints, tasks=tasks), session_id, run_id, instance_id
    )
    return fold_frontier(rows, run_id)


def frontier_sql(
    child: bool,
    inherit_constraints: bool,
    counted: bool = False,
    tasks: bool = True,
    inherited: bool = False,
) -> str:
    """The frontier's rows (``fold_frontier`` reads them); ``$1`` the session, ``$2`` the
    run, ``$3`` the instance. ``counted``: the task count continues one known through
    sequence ``$6`` (``$7`` inputs; both NULL: none known), and its row's
    ``session_sequence`` is the sequence the new count is exact through (the session's
    last, as this statement sees it). With ``inherited``, a main thread's counted rows
    have one more, part ``inherited``: the inputs of the session's inherited history
    through the run's snapshot (its ``session_sequence``), when ``$6`` is not past the
    snapshot (else NULL). Any later run of the session may start its count from it:
    inputs through a sequence at or before its own snapshot are counted alike for every
    run. Without ``tasks``, the task row counts nothing (0)."""
    thread, where = _where(child, inherit_constraints)
    sql = _frontier_sql(thread, where, counted, tasks)
    if not (counted and tasks and inherited) or child:
        return sql
    known = "coalesce($6::bigint, 0)"
    return (
        f"{sql} UNION ALL (SELECT 'inherited', NULL, {_THROUGH}, NULL, NULL, NULL, NULL, false,"
        f" CASE WHEN {known} <= {_THROUGH} THEN coalesce($7::bigint, 0) + count(*) END"
        f"{_FROM} AND r.session_sequence > {known} AND r.session_sequence <= {_THROUGH}"
        f" AND r.kind IN ('user_input', 'supplement') AND {_INHERITED})"
    )


def fold_frontier(rows: Sequence[Mapping[str, Any]], run_id: str) -> Frontier:
    """The frontier from its rows (as ``frontier_sql`` selects them, or their JSON)."""
    latest = next((r for r in rows if r["part"] == "plan"), None)
    tasks = next(int(r["n"]) for r in rows if r["part"] == "task")
    records = [_record(r) for r in rows if r["part"] == "constraint"]
    plan = plan_of(_record(latest) if latest else None, int(latest["n"]) if latest else 0)
    constraints, seen = active_constraints(records, run_id)
    return Frontier(plan, constraints, seen, tasks, declared_texts(records))


def _frontier_sql(thread: str, where: str, counted: bool, tasks: bool = True) -> str:
    """The latest plan update (and how many), the constraint records, the task count
    (every input, retracted ones too: a version only grows). ``$3`` is named in every
    query, so that the main and a child thread's take the same arguments. Without
    ``tasks``, the task row is 0, counted from nothing."""
    # A thread's inputs only grow, and a session's records commit in sequence order
    # (under its row's lock, with its next sequence): a count through the session's last
    # sequence stays exact, and a later count adds only the inputs after it.
    last = "(SELECT s.next_session_sequence - 1 FROM sessions s WHERE s.session_id = $1)"
    count = (
        f"{last}, NULL, NULL, NULL, NULL, false, coalesce($7::bigint, 0) + count(*)"
        f"{_FROM} AND r.session_sequence > coalesce($6::bigint, 0)"
        f" AND r.session_sequence <= {last}"
        if counted
        else f"NULL, NULL, NULL, NULL, NULL, false, count(*){_FROM}"
    )
    task = (
        f"(SELECT 'task', NULL, {count} AND r.kind IN ('user_input', 'supplement') AND {thread})"
        if tasks
        else "(SELECT 'task', NULL, NULL, NULL, NULL, NULL, NULL, false, 0)"
    )
    return (
        f"(SELECT 'plan' AS part, {_COLS}, count(*) OVER () AS n{_FROM}"
        f" AND r.kind = '{PLAN_UPDATED}' AND {thread} AND $3::text IS NOT NULL"
        " ORDER BY r.session_sequence DESC LIMIT 1)"
        f" UNION ALL (SELECT 'constraint', {_COLS}, 0{_FROM} AND {_CONSTRAINT_KINDS}"
        f" AND {where})"
        f" UNION ALL {task}"
    )


async def inherits_constraints(conn: asyncpg.Connection, session_id: str) -> bool:
    """``child_transfer_policy.inherit_constraints`` of the session's release (default
    true): whether a child thread's frontier holds its session's constraints."""
    raw = await conn.fetchval(
        "SELECT r.context_policy->'child_transfer_policy'->>'inherit_constraints'"
        " FROM sessions s JOIN releases r USING (release_id) WHERE s.session_id = $1",
        session_id,
    )
    return bool(raw != "false")


async def thread_frontier(
    conn: asyncpg.Connection,
    session_id: str,
    run_id: str,
    instance_id: str,
    main: str | None = None,
    tasks: bool = True,
) -> Frontier:
    """The frontier of a thread named by run and instance, main or child (the compaction
    worker and the processor, which know the thread but not which kind it is); ``main``:
    the run's main instance, when the caller knows it; ``tasks``: as ``read_frontier``."""
    child, inherit = await _thread_kind(conn, session_id, run_id, instance_id, main)
    return await read_frontier(
        conn, session_id, run_id, instance_id, child=child, inherit_constraints=inherit, tasks=tasks
    )


async def _thread_kind(
    conn: asyncpg.Connection,
    session_id: str,
    run_id: str,
    instance_id: str,
    main: str | None = None,
) -> tuple[bool, bool]:
    """Whether the thread is a child instance, and whether it inherits its session's
    constraints (a main thread has them as its own); ``main`` is read unless given."""
    if main is None:
        main = await conn.fetchval(
            "SELECT main_instance_id FROM runs WHERE session_id=$1 AND run_id=$2",
            session_id,
            run_id,
        )
    child = main is not None and main != instance_id
    return child, await inherits_constraints(conn, session_id) if child else True


async def frontier_at(
    conn: asyncpg.Connection,
    session_id: str,
    run_id: str,
    instance_id: str,
    versions: dict[str, Any],
) -> Frontier:
    """The frontier a call saw, from its ``dependency_versions``: versions count records,
    so plan version N is the thread's N-th plan update and constraints version M the
    fold of its first M constraint records (the inspector, R18)."""
    thread, where = _where(*await _thread_kind(conn, session_id, run_id, instance_id))
    args = (session_id, run_id, instance_id)
    n_plan = int(versions.get("plan_version") or 0)
    n_constraints = int(versions.get("constraints_version") or 0)
    latest = None
    if n_plan:
        latest = await conn.fetchrow(
            f"SELECT {_COLS}{_FROM} AND r.kind = '{PLAN_UPDATED}' AND {thread}"
            f" AND $3::text IS NOT NULL ORDER BY r.session_sequence OFFSET {n_plan - 1} LIMIT 1",
            *args,
        )
    rows = await conn.fetch(
        f"SELECT {_COLS}{_FROM} AND {_CONSTRAINT_KINDS} AND {where} AND $3::text IS NOT NULL"
        f" ORDER BY r.session_sequence LIMIT {n_constraints}",
        *args,
    )
    plan = plan_of(_record(latest) if latest else None, n_plan if latest else 0)
    constraints, seen = active_constraints([_record(r) for r in rows], run_id)
    return Frontier(plan, constraints, seen, int(versions.get("task_version") or 0))


RETIRED = CONSTRAINT_RETIRED  # the kind of a batch's "operations" naming a retired id


async def load_constraint_ids(
    conn: asyncpg.Connection,
    states: dict[str, SessionState],
    operations: dict[str, set[tuple[str, str]]],
) -> None:
    """The constraint ids ever set in each session whose batch retires one,
    read under the sessions' locks, for planning to refuse retiring an unknown one."""
    sids = [sid for sid in states if any(k == RETIRED for _, k in operations.get(sid, ()))]
    if not sids:
        return
    for r in await conn.fetch(
        "SELECT DISTINCT session_id, payload->>'constraint_id' AS cid FROM records"
        f" WHERE session_id = ANY($1::text[]) AND kind = '{CONSTRAINT_SET}'",
        sids,
    ):
        states[r["session_id"]].constraint_ids.add(r["cid"])


class FrontierReads(Protocol):
    async def read(
        self,
        session_id: str,
        run_id: str,
        instance_id: str,
        *,
        child: bool,
        inherit_constraints: bool = True,
    ) -> Frontier: ...


class PgFrontier:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def read(
        self,
        session_id: str,
        run_id: str,
        instance_id: str,
        *,
        child: bool,
        inherit_constraints: bool = True,
    ) -> Frontier:
        async with self.pool.acquire() as conn:
            return await read_frontier(
                conn,
                session_id,
                run_id,
                instance_id,
                child=child,
                inherit_constraints=inherit_constraints,
            )


class NoFrontier:
    """A thread store that holds no plan or constraint records (unit fakes)."""

    async def read(
        self,
        session_id: str,
        run_id: str,
        instance_id: str,
        *,
        child: bool,
        inherit_constraints: bool = True,
    ) -> Frontier:
        return Frontier()
