"""A main thread's new records and frontier read with its run's main view row, in one
statement (one snapshot, one round trip): what a prepare of a cached main view reads
(``services.prepare.assembly.views`` ``ThreadViews.early``), the view's compaction state
then taken from the row (``storage.compaction.view_state`` ``load_view_state``)."""

from __future__ import annotations

import functools
from typing import NamedTuple, Protocol

import asyncpg

from domain.frontier import Frontier
from domain.window.record_view import RecordView
from storage.compaction.view_state import CHAIN_DEPTH, main_row_sql
from storage.records.frontier import frontier_sql
from storage.records.thread_frontier import (
    FrontierQuery,
    PgThreadFrontier,
    TaskCount,
    ThreadFrontierReads,
    thread_read,
)
from storage.records.threads import OWN_RECORDS


@functools.cache
def own_frontier_and_main_sql(query: FrontierQuery) -> str:
    # ``own_and_frontier_sql``'s parameters, then $8 the run's snapshot boundary and $9
    # the depth of the summary chain read with its main view's row (``main_row_sql``):
    # one statement, one snapshot, one round trip.
    sql = frontier_sql(query.child, query.inherit_constraints, counted=True)
    main = main_row_sql(session="$1", through="$8", run="$2", depth="$9")
    return (
        f"WITH f AS ({sql}), mr AS ({main}),"
        " fj AS (SELECT coalesce(jsonb_agg(to_jsonb(f)), '[]'::jsonb) AS frontier FROM f)"
        " SELECT mr.*, fj.frontier, o.* FROM fj LEFT JOIN mr ON true"
        f" LEFT JOIN LATERAL ({OWN_RECORDS}) o ON true ORDER BY o.session_sequence"
    )


class ThreadRead(NamedTuple):
    """A thread's records after a sequence, its frontier and its task count as read, and
    with them the row of its run's main view (``storage.compaction.view_state``)."""

    records: list[RecordView]
    frontier: Frontier
    tasks: TaskCount
    main: asyncpg.Record


async def own_frontier_and_main(
    conn: asyncpg.Connection,
    scope: tuple[str, str, str],
    after: int,
    query: FrontierQuery,
    tasks: TaskCount | None,
    through: int,
) -> ThreadRead:
    """``own_and_frontier`` and the main view's row of run ``scope[1]`` (its snapshot
    boundary ``through``) in one statement."""
    known = (None, None) if tasks is None else tasks
    rows = await conn.fetch(
        own_frontier_and_main_sql(query), *scope, after, None, *known, through, CHAIN_DEPTH
    )
    own, frontier, counted = thread_read(rows, scope[1])
    return ThreadRead(own, frontier, counted, rows[0])


class ThreadViewReads(ThreadFrontierReads, Protocol):
    """Port: ``ThreadFrontierReads``, and the same read with the main view's row."""

    async def own_frontier_and_main(
        self,
        scope: tuple[str, str, str],
        after: int,
        query: FrontierQuery,
        tasks: TaskCount | None,
        through: int,
    ) -> ThreadRead: ...


class PgThreadViewReads(PgThreadFrontier):
    async def own_frontier_and_main(
        self,
        scope: tuple[str, str, str],
        after: int,
        query: FrontierQuery,
        tasks: TaskCount | None,
        through: int,
    ) -> ThreadRead:
        async with self.pool.acquire() as conn:
            return await own_frontier_and_main(conn, scope, after, query, tasks, through)
