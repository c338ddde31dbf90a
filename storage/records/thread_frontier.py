"""A thread's new records and its frontier in one statement: what every prepare reads
after its view (``storage.records.threads`` ``thread_records`` and
``storage.records.frontier`` ``read_frontier``, the same SQL, one round trip).

The frontier's rows come as one JSON array beside each record row (a prepare's new
records are a step's few); with no new record, one row holds the frontier alone.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import asyncpg

from domain.frontier import Frontier
from domain.window.record_view import RecordView
from storage.records.frontier import fold_frontier, frontier_sql
from storage.records.threads import OWN_RECORDS, record_view


@dataclass(frozen=True)
class FrontierQuery:
    """Which frontier a thread has (``FrontierReads.read``'s keywords); ``inherited``: a
    main thread's first read, which also counts the session's inherited inputs
    (``TaskCount.inherited``; a later read of the thread continues its own count)."""

    child: bool
    inherit_constraints: bool = True
    inherited: bool = False


class TaskCount(NamedTuple):
    """A thread's task count (R11.6) as read: exact through a session sequence.
    ``inherited``: a main thread's inputs through its run's snapshot (the session's
    inherited history: what a later run's first count may start from), when the read
    counted them."""

    through: int
    inputs: int
    inherited: int | None = None


@functools.cache
def own_and_frontier_sql(query: FrontierQuery, beside: str = "") -> str:
    # $1 session, $2 run, $3 instance (both reads'), $4 the sequence the view is at, $5
    # unused (NULL), $6/$7 the task count known before (``frontier_sql``'s ``counted``).
    # ``beside``: more columns of every row, "<scalar expression> AS <name>" (a caller's
    # read in the same round trip: ``storage.compaction.read_ahead``).
    sql = frontier_sql(
        query.child, query.inherit_constraints, counted=True, inherited=query.inherited
    )
    more = f", {beside}" if beside else ""
    return (
        f"WITH f AS ({sql}),"
        f" fj AS (SELECT coalesce(jsonb_agg(to_jsonb(f)), '[]'::jsonb) AS frontier{more} FROM f)"
        f" SELECT fj.*, o.* FROM fj LEFT JOIN LATERAL ({OWN_RECORDS}) o ON true"
        " ORDER BY o.session_sequence"
    )


async def own_and_frontier(
    conn: asyncpg.Connection,
    session_id: str,
    run_id: str,
    instance_id: str,
    after: int,
    query: FrontierQuery,
    tasks: TaskCount | None = None,
) -> tuple[list[RecordView], Frontier, TaskCount]:
    """The thread's own records after ``after`` and its frontier as committed now; its
    task count continues ``tasks`` (the last one read) when given, and is returned for
    the next read (a long thread's inputs are not counted again at every prepare)."""
    rows = await conn.fetch(
        own_and_frontier_sql(query), session_id, run_id, instance_id, after, None, *known(tasks)
    )
    return parsed(rows, run_id)


def known(tasks: TaskCount | None) -> tuple[int | None, int | None]:
    """``$6`` and ``$7`` of ``frontier_sql``: the count a read continues."""
    return (None, None) if tasks is None else (tasks.through, tasks.inputs)


def parsed(rows: list[asyncpg.Record], run_id: str) -> tuple[list[RecordView], Frontier, TaskCount]:
    """The records, frontier and task count of ``own_and_frontier_sql``'s rows."""
    parts = rows[0]["frontier"]
    frontier = fold_frontier(parts, run_id)
    task = next(p for p in parts if p["part"] == "task")
    last = task["session_sequence"]  # None: no session row (nothing counted)
    inherited = next((p["n"] for p in parts if p["part"] == "inherited"), None)
    counted = TaskCount(
        0 if last is None else int(last),
        frontier.task_version,
        None if inherited is None else int(inherited),
    )
    return [record_view(r) for r in rows if r["record_id"] is not None], frontier, counted


class ThreadFrontierReads(Protocol):
    """Port: a thread's own records after a sequence and its frontier, read together."""

    async def own_and_frontier(
        self,
        session_id: str,
        run_id: str,
        instance_id: str,
        after: int,
        query: FrontierQuery,
        tasks: TaskCount | None = None,
    ) -> tuple[list[RecordView], Frontier, TaskCount]: ...


class PgThreadFrontier:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def own_and_frontier(
        self,
        session_id: str,
        run_id: str,
        instance_id: str,
        after: int,
        query: FrontierQuery,
        tasks: TaskCount | None = None,
    ) -> tuple[list[RecordView], Frontier, TaskCount]:
        async with self.pool.acquire() as conn:
            return await own_and_frontier(
                conn, session_id, run_id, instance_id, after, query, tasks
            )
