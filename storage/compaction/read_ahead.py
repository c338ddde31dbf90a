"""A kept main view's read ahead: the thread's new records and frontier
(``storage.records.thread_frontier``) and the main view's compaction row
(``storage.compaction.view_state.main_row_sql``) in one statement, as committed at one
moment. Prepare reads it before it decides on the summary its view shows (the row gives
it): the common prepare then costs one round trip, not two.

The view's row comes as one JSON object beside the frontier's array (empty without the
session).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Protocol

import asyncpg

from domain.frontier import Frontier
from domain.window.record_view import RecordView
from storage.compaction.view_state import CHAIN_DEPTH, MainRow, main_row_sql
from storage.records.thread_frontier import (
    FrontierQuery,
    TaskCount,
    known,
    own_and_frontier_sql,
    parsed,
)


@functools.cache
def read_ahead_sql(query: FrontierQuery) -> str:
    # ``own_and_frontier_sql``'s arguments, then $8 the run's snapshot boundary and $9
    # how deep the summary chain is read (``main_row_sql``'s).
    view = main_row_sql("$1", "$8", "$2", "$9")
    return own_and_frontier_sql(
        query, f"coalesce((SELECT to_jsonb(v) FROM ({view}) v), '{{}}'::jsonb) AS view"
    )


@dataclass(frozen=True)
class ReadAhead:
    """A main thread's records after ``after``, its frontier and task count, and its main
    view's row (``load_view_state``'s ``row``)."""

    after: int
    own: list[RecordView]
    frontier: Frontier
    tasks: TaskCount
    view: MainRow


async def read_ahead(
    conn: asyncpg.Connection,
    scope: tuple[str, str, str],
    after: int,
    query: FrontierQuery,
    tasks: TaskCount | None,
    through: int,
) -> ReadAhead:
    """``scope``'s (session, run, main instance) ``own_and_frontier`` after ``after``,
    and the main view's row at the run's snapshot boundary ``through``."""
    session_id, run_id, instance_id = scope
    rows = await conn.fetch(
        read_ahead_sql(query),
        session_id, run_id, instance_id, after, None, *known(tasks), through, CHAIN_DEPTH,
    )  # fmt: skip
    own, frontier, counted = parsed(rows, run_id)
    return ReadAhead(after, own, frontier, counted, rows[0]["view"])


class ReadAheads(Protocol):
    """Port: a kept main view's read ahead."""

    async def read(
        self,
        scope: tuple[str, str, str],
        after: int,
        query: FrontierQuery,
        tasks: TaskCount | None,
        through: int,
    ) -> ReadAhead: ...


class PgReadAheads:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def read(
        self,
        scope: tuple[str, str, str],
        after: int,
        query: FrontierQuery,
        tasks: TaskCount | None,
        through: int,
    ) -> ReadAhead:
        async with self.pool.acquire() as conn:
            return await read_ahead(conn, scope, after, query, tasks, through)
