"""Reading a thread's execution frontier (issue 24): its current plan, the constraints in
force and the task version, folded by ``domain.frontier`` from their own records.

Prepare reads it for every action context (R4.4) and the session processor at a summary
commit (R11.6); both read the same records, so the versions they compare are the same.
A thread is the session's main thread (records of no instance or of their run's main
instance) or a child instance (``run_id`` + ``instance_id``, R13.1): a child has a plan
of its own and sees the main thread's constraints when its policy inherits them.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import asyncpg

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
from domain.planning import SessionState
from storage.retraction import live_sql

_FROM = (
    " FROM records r LEFT JOIN runs u ON u.session_id = r.session_id AND u.run_id = r.run_id"
    " WHERE r.session_id = $1"
)
_MAIN = "(r.instance_id IS NULL OR r.instance_id = u.main_instance_id)"
_CHILD = "(r.run_id = $2 AND r.instance_id = $3)"
_COLS = "r.record_id, r.session_sequence, r.kind, r.run_id, r.content_inline, r.payload"


def _constraints_sql(where: str) -> str:
    return (
        f"SELECT {_COLS}{_FROM} AND r.kind IN ('{CONSTRAINT_SET}', '{CONSTRAINT_RETIRED}')"
        f" AND {where} ORDER BY r.session_sequence"
    )


def _payload(raw: Any) -> dict[str, Any]:
    value = json.loads(raw) if isinstance(raw, str) else raw
    return dict(value or {})


def _record(r: asyncpg.Record) -> FrontierRecord:
    return FrontierRecord(
        r["record_id"],
        r["session_sequence"],
        r["kind"],
        r["run_id"],
        r["content_inline"] or "",
        _payload(r["payload"]),
    )


async def read_frontier(
    conn: asyncpg.Connection,
    session_id: str,
    run_id: str,
    instance_id: str,
    *,
    child: bool,
    inherit_constraints: bool = True,
) -> Frontier:
    """The frontier of the thread ``(run_id, instance_id)`` as committed now, in one round
    trip (it is read at every prepare)."""
    thread, args = (_CHILD, (session_id, run_id, instance_id)) if child else (_MAIN, (session_id,))
    where = f"({_MAIN} OR {_CHILD})" if child and inherit_constraints else thread
    rows = await conn.fetch(_frontier_sql(thread, where), *args)
    latest = next((r for r in rows if r["part"] == "plan"), None)
    tasks = next(int(r["n"]) for r in rows if r["part"] == "task")
    records = [_record(r) for r in rows if r["part"] == "constraint"]
    plan = plan_of(_record(latest) if latest else None, int(latest["n"]) if latest else 0)
    constraints, seen = active_constraints(records, run_id)
    return Frontier(plan, constraints, seen, tasks, declared_texts(records))


def _frontier_sql(thread: str, where: str) -> str:
    """The latest plan update (and how many), the constraint records, the task count."""
    return (
        f"(SELECT 'plan' AS part, {_PLAN_SQL.format(thread=thread)})"
        f" UNION ALL (SELECT 'constraint', {_COLS}, 0{_FROM}"
        f" AND r.kind IN ('{CONSTRAINT_SET}', '{CONSTRAINT_RETIRED}') AND {where})"
        " UNION ALL (SELECT 'task', NULL, NULL, NULL, NULL, NULL, NULL, count(*)"
        f"{_FROM} AND r.kind IN ('user_input', 'supplement') AND {thread} AND {live_sql('r')})"
    )


_PLAN_SQL = (
    f"{_COLS}, count(*) OVER () AS n{_FROM} AND r.kind = '{PLAN_UPDATED}' AND {{thread}}"
    " ORDER BY r.session_sequence DESC LIMIT 1"
)


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
    main = await conn.fetchval(
        "SELECT main_instance_id FROM runs WHERE session_id=$1 AND run_id=$2", session_id, run_id
    )
    child = main is not None and main != instance_id
    thread, args = (_CHILD, (session_id, run_id, instance_id)) if child else (_MAIN, (session_id,))
    where = f"({_MAIN} OR {_CHILD})" if child else thread
    n_plan = int(versions.get("plan_version") or 0)
    n_constraints = int(versions.get("constraints_version") or 0)
    latest = None
    if n_plan:
        latest = await conn.fetchrow(
            f"SELECT {_COLS}{_FROM} AND r.kind = '{PLAN_UPDATED}' AND {thread}"
            f" ORDER BY r.session_sequence OFFSET {n_plan - 1} LIMIT 1",
            *args,
        )
    rows = await conn.fetch(
        f"{_constraints_sql(where)} LIMIT {n_constraints}",
        *((session_id, run_id, instance_id) if child else (session_id,)),
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
    """The constraint ids ever set in each session whose batch retires one (issue 24),
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
