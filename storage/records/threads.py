"""Reading a thread's source records as ``RecordView``s — used by Prepare (the view) and
the compaction service (what to summarize), so both see exactly the same history."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import asyncpg

from domain.context.rendering import RecordView
from storage.records.retraction import live_sql


@dataclass(frozen=True)
class Snapshot:
    """A run's immutable history snapshot (R2.1) and its status when read."""

    snapshot_id: int
    session_id: str
    run_id: str
    main_instance_id: str
    through_session_sequence: int
    policy_revision: str
    run_status: str


@dataclass(frozen=True)
class SummaryView:
    """A summary revision as a view shows it (revisions are immutable)."""

    summary_id: str
    text: str
    tokens: int
    covered: frozenset[str]


# A retracted record leaves every view (Prepare's and what compaction summarizes)
# and a retraction renders nothing; both stay readable by id (storage.blobs).
# Plan and constraint records are state of record, rendered as blocks of their own
# (storage.records.frontier): never in a thread's history, never summarized.
_LIVE = (
    f" AND {live_sql('r')}"
    " AND r.kind NOT IN ('plan_updated', 'constraint_set', 'constraint_retired')"
)

# Content in the blob store (over 64 KiB) is read whole only where it must be shown whole:
# what a user or model said, a child's result and a skill body (R10.4, R12.3). Any other
# large result is shown as a view, so only a bounded prefix is read (R10.3).
PREFIX_BYTES = 32768
_WHOLE = (
    "r.kind IN ('user_input', 'supplement', 'assistant_message', 'child_result')"
    " OR jsonb_typeof(r.payload->'skill') = 'object'"
)
# A record a summary covers is never shown, only tracked (skill loads, activations:
# ``ThreadRenderer._track_skill``), so its content is not read unless it is a skill load:
# with a summary over most of a long history, a cold view reads metadata, not text.
_SKILL = "jsonb_typeof(r.payload->'skill') = 'object'"


def _cols(hidden: str) -> str:
    """The columns of a view row; ``hidden``: SQL true when the content is not needed."""
    keep = f"NOT ({hidden}) OR {_SKILL}"
    return (
        "r.record_id, r.session_sequence, r.run_id, r.instance_id, r.kind, r.authority,"
        f" CASE WHEN {keep} THEN r.content_inline ELSE '' END AS text,"
        f" CASE WHEN r.content_inline IS NULL AND ({keep}) AND ({_WHOLE})"
        " THEN b.content END AS whole,"
        f" CASE WHEN r.content_inline IS NULL AND ({keep}) AND NOT ({_WHOLE})"
        f" THEN substring(b.content FROM 1 FOR {PREFIX_BYTES}) END AS prefix,"
        " r.content_length, r.content_sha256,"
        " r.payload, r.token_count, r.resource_ref,"
        " (r.resource_ref IS NOT NULL AND EXISTS (SELECT 1 FROM revoked_resources v"
        "   WHERE v.session_id = r.session_id AND v.resource_id = r.resource_ref)) AS revoked"
    )


_COLS = _cols("false")


def record_view(r: asyncpg.Record) -> RecordView:
    # A revoked resource's content is withdrawn from every view (R15.3); the record keeps
    # its place, call id and status, so tool groups stay complete.
    length = -1
    if r["revoked"]:
        text = f"[withdrawn: resource {r['resource_ref']} was revoked]"
    elif r["text"] is not None:
        text = r["text"]
    elif r["whole"] is not None:  # decoded here: bytes that are not UTF-8 never fail a view
        text = bytes(r["whole"]).decode("utf-8", errors="replace")
    else:  # a bounded prefix of a large blob; a cut multi-byte character is dropped
        text = bytes(r["prefix"] or b"").decode("utf-8", errors="ignore")
        length = int(r["content_length"])
    return RecordView(
        r["record_id"],
        r["session_sequence"],
        r["run_id"],
        r["instance_id"],
        r["kind"],
        r["authority"],
        text,
        r["payload"],
        r["token_count"],
        length,
        r["content_sha256"],
    )


# A record of session $1 with its run (a view inherits main threads). The run is looked
# up in session $1 by name: behind a subquery's fence the planner does not know that
# ``r.session_id`` is $1, and hashed every run of every session.
_RUN = " LEFT JOIN runs u ON u.session_id = $1 AND u.run_id = r.run_id"
_BLOB = " LEFT JOIN blobs b ON b.space_id = r.space_id AND b.sha256 = r.content_ref"
_BLOB_AND_RUN = f"{_BLOB}{_RUN}"
_RECORDS_OF_RUNS = f" FROM records r{_BLOB_AND_RUN}"
_INHERITABLE = (
    " AND r.visibility IN ('session', 'actor')"
    " AND (r.instance_id IS NULL OR r.instance_id = u.main_instance_id)"
    f"{_LIVE}"
)
# The session's records through $2, each marked covered by a hash join on the ids, in a
# subquery of its own (OFFSET 0): planned with the joins below, the ids were joined last,
# after a runs filter estimated at one row, by a nested loop over every id for every
# record — quadratic (``= ANY`` of the array would be too): 18 ms at 600 records.
_INHERITED_FROM = (
    " FROM (SELECT r.*, c.id IS NOT NULL AS covered FROM records r"
    " LEFT JOIN unnest($3::text[]) AS c(id) ON c.id = r.record_id"
    f" WHERE r.session_id=$1 AND r.session_sequence <= $2 OFFSET 0) r{_BLOB_AND_RUN}"
    f" WHERE true{_INHERITABLE}"
)
_ORDER = " ORDER BY r.session_sequence"
_INHERITED = f"SELECT {_cols('r.covered')}{_INHERITED_FROM}{_ORDER}"
# What a renderer does with a covered record: counts it, and tracks it when it is a skill
# load, an activation or a run start (skills' idle runs, ``domain.window.active_skills``). Only
# those are read; the rest are counted in SQL: a view over a long, summarized history
# reads what it shows.
# (IS TRUE: a payload without "skill" makes the comparison NULL, and NOT NULL is no row.)
_TRACKED = f"(({_SKILL}) IS TRUE OR r.kind IN ('resource_activation', 'run_started'))"
# The shown records and, on each row, how many were not read: one scan of the history.
# The inner query marks and counts the unread rows over all of them, carrying only what
# it decides on (not the content); the outer one reads the shown rows whole, and the
# first row whatever it is, so that the count comes back when nothing is shown (the
# caller drops an unread row).
_INHERITED_SHOWN = (
    f"SELECT {_cols('k.covered')}, k.unread, k.unread_count FROM (SELECT r.session_sequence,"
    f" r.covered, r.covered AND NOT {_TRACKED} AS unread,"
    f" count(*) FILTER (WHERE r.covered AND NOT {_TRACKED}) OVER () AS unread_count,"
    " row_number() OVER () AS nth"
    " FROM (SELECT r.session_id, r.record_id, r.session_sequence, r.run_id, r.instance_id,"
    " r.kind, r.visibility, r.payload, c.id IS NOT NULL AS covered FROM records r"
    " LEFT JOIN unnest($3::text[]) AS c(id) ON c.id = r.record_id"
    f" WHERE r.session_id=$1 AND r.session_sequence <= $2 OFFSET 0) r{_RUN}"
    f" WHERE true{_INHERITABLE}) k"
    " JOIN records r ON r.session_id = $1 AND r.session_sequence = k.session_sequence"
    f"{_BLOB} WHERE NOT k.unread OR k.nth = 1{_ORDER}"
)
_INHERITED_UNCOVERED = f"SELECT {_COLS}{_INHERITED_FROM} AND NOT r.covered{_ORDER}"
# The inherited records after $2, through $3 (a view continued from an earlier one): few,
# read whole with whether a renderer tracks them; covered ids are checked in memory.
_INHERITED_TAIL = (
    f"SELECT {_COLS}, {_TRACKED} AS tracked{_RECORDS_OF_RUNS}"
    f" WHERE r.session_id=$1 AND r.session_sequence > $2 AND r.session_sequence <= $3"
    f"{_INHERITABLE}{_ORDER}"
)


# A thread's own records: $1 session, $2 run, $3 instance, after $4 (through $5 if not null).
OWN_RECORDS = (
    f"SELECT {_COLS} FROM records r LEFT JOIN blobs b"
    " ON b.space_id = r.space_id AND b.sha256 = r.content_ref"
    " WHERE r.session_id=$1 AND r.run_id=$2"
    " AND r.instance_id=$3 AND r.session_sequence > $4"
    " AND ($5::bigint IS NULL OR r.session_sequence <= $5)"
    f"{_LIVE} ORDER BY r.session_sequence"
)


class Inherited(NamedTuple):
    """A view's inherited history as read: the records to feed, and how many covered
    records were not read (nothing to show or track; counted only)."""

    records: list[RecordView]
    unread: int = 0


# The reads below mark a summary's covered ids ($3) by a hash join on ``unnest($3)``:
# the plan made once for any arguments hashes the ids whatever their count, and runs
# as fast as one made for them (measured at 1,600 records and 1,575 covered ids), so
# they need no plan of their own at each call.


async def inherited_records(
    conn: asyncpg.Connection, session_id: str, through: int, covered: frozenset[str] = frozenset()
) -> list[RecordView]:
    """R2.2/R2.3: everything committed before the run started, from the main threads of
    earlier runs (child threads stay isolated, R13), once each, in session order. The
    ``covered`` records (a summary's) come without their content, except skill loads."""
    rows = await conn.fetch(_INHERITED, session_id, through, list(covered))
    return [record_view(r) for r in rows]


async def inherited_view(
    conn: asyncpg.Connection, session_id: str, through: int, covered: frozenset[str]
) -> Inherited:
    """``inherited_records`` as a renderer needs them: covered records only where they
    are tracked; the others counted."""
    ids = list(covered)
    rows = await conn.fetch(_INHERITED_SHOWN, session_id, through, ids)
    unread = int(rows[0]["unread_count"]) if rows else 0
    return Inherited([record_view(r) for r in rows if not r["unread"]], unread)


async def uncovered_records(
    conn: asyncpg.Connection, session_id: str, through: int, covered: frozenset[str]
) -> list[RecordView]:
    """The inherited records no summary covers (compaction selection needs no other)."""
    rows = await conn.fetch(_INHERITED_UNCOVERED, session_id, through, list(covered))
    return [record_view(r) for r in rows]


async def inherited_range(
    conn: asyncpg.Connection, session_id: str, after: int, through: int
) -> list[RecordView]:
    """The inherited records after sequence ``after``, through ``through``: those a view
    kept through ``after`` goes on with (a range of the session, not its history)."""
    return [record_view(r) for r in await conn.fetch(_INHERITED_TAIL, session_id, after, through)]


async def thread_records(
    conn: asyncpg.Connection,
    session_id: str,
    run_id: str,
    instance_id: str,
    after: int,
    upto: int | None = None,
) -> list[RecordView]:
    """The thread's own records with ``after < session_sequence <= upto``."""
    rows = await conn.fetch(
        OWN_RECORDS,
        session_id,
        run_id,
        instance_id,
        after,
        upto,
    )
    return [record_view(r) for r in rows]


async def snapshot_boundary(conn: asyncpg.Connection, session_id: str, run_id: str) -> int:
    through = await conn.fetchval(
        "SELECT x.through_session_sequence FROM runs u JOIN history_snapshots x"
        " USING (snapshot_id) WHERE u.session_id=$1 AND u.run_id=$2",
        session_id,
        run_id,
    )
    return int(through or 0)


async def child_transfer(
    conn: asyncpg.Connection, session_id: str, run_id: str, instance_id: str
) -> list[str]:
    """The record ids a parent exported to this child thread (R13.2), in export order."""
    rows = await conn.fetch(
        "SELECT content_inline FROM records WHERE session_id=$1 AND run_id=$2"
        " AND instance_id=$3 AND kind='resource_activation'"
        " AND payload->>'resource_kind' = 'child_transfer' ORDER BY session_sequence",
        session_id,
        run_id,
        instance_id,
    )
    out: list[str] = []
    for r in rows:
        out.extend(json.loads(r["content_inline"] or "[]"))
    return list(dict.fromkeys(out))


async def records_by_id(
    conn: asyncpg.Connection, session_id: str, ids: list[str]
) -> list[RecordView]:
    """Main-thread (or session-scoped) records of the session among ``ids`` — what a
    parent may transfer; another child's records are never material for a sibling."""
    rows = await conn.fetch(
        f"SELECT {_COLS} FROM records r LEFT JOIN blobs b"
        " ON b.space_id = r.space_id AND b.sha256 = r.content_ref"
        " LEFT JOIN runs u"
        " ON u.session_id = r.session_id AND u.run_id = r.run_id"
        " WHERE r.session_id=$1 AND r.record_id = ANY($2::text[])"
        " AND (r.instance_id IS NULL OR r.instance_id = u.main_instance_id)"
        f"{_LIVE} ORDER BY r.session_sequence",
        session_id,
        ids,
    )
    return [record_view(r) for r in rows]


async def run_snapshot(conn: asyncpg.Connection, session_id: str, run_id: str) -> Snapshot | None:
    r = await conn.fetchrow(
        "SELECT x.snapshot_id, x.session_id, x.run_id, u.main_instance_id,"
        " x.through_session_sequence, x.policy_revision, u.status AS run_status"
        " FROM runs u JOIN history_snapshots x USING (snapshot_id)"
        " WHERE u.session_id=$1 AND u.run_id=$2",
        session_id,
        run_id,
    )
    return None if r is None else Snapshot(**dict(r))


class Threads(Protocol):
    """Port: what a thread's view is built from (``ThreadViews``)."""

    async def snapshot(self, session_id: str, run_id: str) -> Snapshot | None: ...

    async def inherited(
        self, session_id: str, through: int, covered: frozenset[str] = frozenset()
    ) -> Inherited:
        """Records before the snapshot; ``covered`` ones only where a renderer tracks
        them (and then maybe without content), the others counted."""

    async def inherited_tail(
        self, session_id: str, after: int, through: int, covered: frozenset[str]
    ) -> Inherited:
        """``inherited``'s records after sequence ``after`` (through ``through``)."""

    async def own(
        self, session_id: str, run_id: str, instance_id: str, after: int
    ) -> list[RecordView]:
        """The thread's own records after ``after``."""

    async def transferred(self, session_id: str, run_id: str, instance_id: str) -> list[RecordView]:
        """What a parent exported to this child thread (R13.2), as material."""


class PgThreads:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def snapshot(self, session_id: str, run_id: str) -> Snapshot | None:
        async with self.pool.acquire() as conn:
            return await run_snapshot(conn, session_id, run_id)

    async def inherited(
        self, session_id: str, through: int, covered: frozenset[str] = frozenset()
    ) -> Inherited:
        async with self.pool.acquire() as conn:
            return await inherited_view(conn, session_id, through, covered)

    async def inherited_tail(
        self, session_id: str, after: int, through: int, covered: frozenset[str]
    ) -> Inherited:
        shown: list[RecordView] = []
        unread = 0  # covered and untracked: counted, as ``inherited_view`` counts them
        for r in await self.pool.fetch(_INHERITED_TAIL, session_id, after, through):
            if r["record_id"] in covered and not r["tracked"]:
                unread += 1
            else:
                shown.append(record_view(r))
        return Inherited(shown, unread)

    async def own(
        self, session_id: str, run_id: str, instance_id: str, after: int
    ) -> list[RecordView]:
        async with self.pool.acquire() as conn:
            return await thread_records(conn, session_id, run_id, instance_id, after)

    async def transferred(self, session_id: str, run_id: str, instance_id: str) -> list[RecordView]:
        async with self.pool.acquire() as conn:
            ids = await child_transfer(conn, session_id, run_id, instance_id)
            return await records_by_id(conn, session_id, ids)
