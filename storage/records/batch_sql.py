"""The statement that writes a planned batch in one round trip (issue 37: each round trip
of a processor transaction costs the machine ~0.2 ms, client and server), its arguments,
and its parts written alone.

Its parts are data-modifying CTEs, each present when the batch has what it writes: the
records, the new runs with their snapshots, the runs' changes, then always the threads,
the sessions and the main views' token estimates, and last the consumer offsets with the
notification of the commit as the statement's result. Every data-modifying CTE runs
whatever the result reads; none sees the others' rows (one snapshot), so a change of a
run inserted by the same statement is written by a statement after it
(``storage.records.ingest``). Arguments are numbered in the order of the parts:
``$1``-``$12`` the threads', sessions' and estimates', then each present part's
(``new_run_args``, ``change_args``, ``tracking_args``). ``write_runs`` and
``write_offsets`` send a part alone.
"""

from __future__ import annotations

import functools
from typing import Any

import asyncpg

from domain.planning.state import BatchPlan, RunChange
from domain.record_rows import RECORD_COLUMNS
from storage.records.offsets import NOTIFY_CHANNEL, commit_note

# The type of each of ``RECORD_COLUMNS`` (the statement's arrays are cast to them).
RECORD_TYPES = {
    "session_id": "text", "session_sequence": "bigint", "record_id": "text",
    "event_key": "text", "space_id": "text", "actor_id": "text", "run_id": "text",
    "instance_id": "text", "instance_sequence": "bigint", "kind": "text",
    "authority": "text", "visibility": "text", "operation_id": "text",
    "content_inline": "text", "content_ref": "text", "content_sha256": "text",
    "content_length": "bigint", "media_type": "text", "payload": "jsonb",
    "token_count": "integer", "token_method": "text", "producer": "text",
    "occurred_at_ms": "bigint", "source_partition": "integer", "source_offset": "bigint",
    "resource_ref": "text",
}  # fmt: skip
# Each run's last change in a batch, and whether the batch reopened it.
Changes = list[tuple[RunChange, bool]]
# Each part's number of arguments.
NEW_RUN_ARGS, CHANGE_ARGS, TRACKING_ARGS = 8, 7, 6

_THREADS_AND_SESSIONS = (
    " upserted AS (INSERT INTO threads (session_id, run_id, instance_id,"
    " next_instance_sequence, revision) SELECT t.s, t.r, t.i, t.n, t.n - 1"
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS t(s, r, i, n)"
    " ON CONFLICT (session_id, run_id, instance_id)"
    " DO UPDATE SET next_instance_sequence = EXCLUDED.next_instance_sequence,"
    " revision = EXCLUDED.revision RETURNING 1),"
    # Most sessions have no compaction state yet (no prepare seen): no row to grow.
    " grown AS (UPDATE compaction_state c SET view_tokens = c.view_tokens + g.t"
    " FROM unnest($11::text[], $12::bigint[]) AS g(sid, t)"
    " WHERE c.session_id = g.sid AND c.lineage = 'main' RETURNING 1),"
    " updated AS (UPDATE sessions SET next_session_sequence = d.n, active_run_id = d.a,"
    " revision = d.v, user_turns = d.u, model_steps = d.m"
    " FROM unnest($5::text[], $6::bigint[], $7::text[], $8::bigint[], $9::bigint[],"
    " $10::bigint[]) AS d(sid, n, a, v, u, m) WHERE sessions.session_id = d.sid RETURNING 1)"
)


def _args(first: int, n: int) -> list[str]:
    return [f"${first + i}" for i in range(n)]


def records_cte(first: int) -> str:
    """The records, a column's values an array each (``RECORD_COLUMNS``' order)."""
    args = zip(_args(first, len(RECORD_COLUMNS)), RECORD_COLUMNS, strict=True)
    casts = ", ".join(f"{a}::{RECORD_TYPES[c]}[]" for a, c in args)
    return (
        f" inserted AS (INSERT INTO records ({', '.join(RECORD_COLUMNS)})"
        f" SELECT * FROM unnest({casts}) RETURNING 1),"
    )


def new_runs_cte(first: int) -> str:
    """The new runs, each with its history snapshot: session, run, the snapshot's
    boundary, policy revision and counters, the main instance, the start's sequence."""
    s, r, through, policy, turns, steps, main, started = _args(first, NEW_RUN_ARGS)
    return (
        " snaps AS (INSERT INTO history_snapshots (session_id, run_id,"
        " through_session_sequence, policy_revision, user_turns, model_steps)"
        f" SELECT * FROM unnest({s}::text[], {r}::text[], {through}::bigint[],"
        f" {policy}::text[], {turns}::bigint[], {steps}::bigint[])"
        " RETURNING snapshot_id, session_id, run_id),"
        " started AS (INSERT INTO runs (session_id, run_id, main_instance_id, status,"
        " snapshot_id, started_sequence) SELECT x.session_id, x.run_id, n.main, 'active',"
        f" x.snapshot_id, n.started FROM snaps x JOIN unnest({s}::text[], {r}::text[],"
        f" {main}::text[], {started}::bigint[]) AS n(sid, rid, main, started)"
        " ON n.sid = x.session_id AND n.rid = x.run_id RETURNING 1),"
    )


def changes_cte(first: int) -> str:
    """Runs' changes, each the run's whole state after the batch: session, run, status,
    resumes, ends, refused resumes, and whether the batch reopened it (a resume: an end
    in the batch is then a new one). A refused resume changes only the counters: its run
    keeps its ``ended_at``."""
    s, r, status, resumes, ends, refused, reopened = _args(first, CHANGE_ARGS)
    return (
        " changed AS (UPDATE runs SET status = c.status, ended_at = CASE WHEN c.status ="
        " 'active' THEN NULL WHEN runs.status = c.status AND NOT c.reopened THEN"
        " runs.ended_at ELSE now() END, resumes = c.resumes, ends = c.ends,"
        f" refused_resumes = c.refused FROM unnest({s}::text[], {r}::text[],"
        f" {status}::text[], {resumes}::integer[], {ends}::integer[], {refused}::integer[],"
        f" {reopened}::boolean[]) AS c(sid, rid, status, resumes, ends, refused, reopened)"
        " WHERE runs.session_id = c.sid AND runs.run_id = c.rid RETURNING 1),"
    )


def tracked(first: int) -> str:
    """The tracking rows' upsert, and the statement's result: the notification
    (delivered at commit) that wakes Prepare's read-your-writes waiters without polling,
    the offsets in it. Arguments: the consumer, the topic, the partitions, their next
    offsets, the channel and the note."""
    consumer, topic, parts, offsets, channel, note = _args(first, TRACKING_ARGS)
    return (
        " tracked AS (INSERT INTO consumer_offsets (consumer, topic, partition, next_offset)"
        f" SELECT {consumer}, {topic}, t.p, t.o FROM unnest({parts}::integer[],"
        f" {offsets}::bigint[]) AS t(p, o) ON CONFLICT (consumer, topic, partition) DO"
        " UPDATE SET next_offset = GREATEST(consumer_offsets.next_offset,"
        f" EXCLUDED.next_offset), updated_at = now() RETURNING 1)"
        f" SELECT pg_notify({channel}, {note})"
    )


def alone(cte: str) -> str:
    """A part as a statement of its own (its arguments from ``$1``)."""
    return "WITH" + cte.rstrip(",") + " SELECT 1"


@functools.cache
def batch_sql(records: bool, new_runs: bool, changes: bool, offsets: bool) -> str:
    """The batch's statement with the parts it has."""
    first, body = 13, ""
    for present, cte, n in (
        (records, records_cte, len(RECORD_COLUMNS)),
        (new_runs, new_runs_cte, NEW_RUN_ARGS),
        (changes, changes_cte, CHANGE_ARGS),
    ):
        if present:
            body, first = body + cte(first), first + n
    tail = "," + tracked(first) if offsets else " SELECT 1"
    return "WITH" + body + _THREADS_AND_SESSIONS + tail


def run_changes(plan: BatchPlan) -> Changes:
    """Each run's last change (its whole state after the batch: one statement updates a
    row once), and whether the batch reopened it (a resume: an end in it is a new one)."""
    last = {(c.session_id, c.run_id): c for c in plan.run_changes}
    reopened = {(c.session_id, c.run_id) for c in plan.run_changes if c.status == "active"}
    return [(c, key in reopened) for key, c in last.items()]


async def write_runs(conn: asyncpg.Connection, plan: BatchPlan) -> None:
    """The batch's new runs (each with its snapshot) in a statement, then their changes in
    another: what ``write_plan`` writes of runs, on its own."""
    if plan.new_runs:
        await conn.execute(alone(new_runs_cte(1)), *new_run_args(plan))
    if changes := run_changes(plan):
        await conn.execute(alone(changes_cte(1)), *change_args(changes))


def new_run_args(plan: BatchPlan) -> tuple[list[Any], ...]:
    """``new_runs_cte``'s arguments."""
    runs = plan.new_runs
    return (
        [r.session_id for r in runs],
        [r.run_id for r in runs],
        [r.through_session_sequence for r in runs],
        [r.policy_revision for r in runs],
        [r.user_turns for r in runs],
        [r.model_steps for r in runs],
        [r.main_instance_id for r in runs],
        [r.started_sequence for r in runs],
    )


def change_args(changes: Changes) -> tuple[list[Any], ...]:
    """``changes_cte``'s arguments."""
    return (
        [c.session_id for c, _ in changes],
        [c.run_id for c, _ in changes],
        [c.status for c, _ in changes],
        [c.resumes for c, _ in changes],
        [c.ends for c, _ in changes],
        [c.refused_resumes for c, _ in changes],
        [reopened for _, reopened in changes],
    )


async def write_offsets(
    conn: asyncpg.Connection, consumer: str, topic: str, next_offsets: dict[int, int]
) -> None:
    """The tracking rows and their notification in one round trip (a batch's records
    take them in their own statement: ``write_plan``)."""
    if not next_offsets:
        return
    sql = "WITH" + tracked(1)
    await conn.execute(sql, *tracking_args(consumer, topic, next_offsets))


def tracking_args(consumer: str, topic: str, next_offsets: dict[int, int]) -> tuple[Any, ...]:
    """``tracked``'s arguments, in its order."""
    parts = sorted(next_offsets.items())
    note = commit_note(consumer, topic, next_offsets)
    return consumer, topic, [p for p, _ in parts], [o for _, o in parts], NOTIFY_CHANNEL, note
