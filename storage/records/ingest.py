"""The session processor's writes: a planned batch in the transaction that loaded its
sessions (``storage.records.session_states``) — records, runs, snapshots, threads,
outcomes, consumer offsets — and the notification that wakes waiting readers."""

from __future__ import annotations

import functools
from typing import Any

import asyncpg

from domain.planning.state import BatchPlan, SessionState
from domain.record_rows import RECORD_COLUMNS, record_rows
from storage.records import outcomes
from storage.records.offsets import commit_note
from storage.records.outcomes import RefusedEvent

NOTIFY_CHANNEL = "ctx_committed"

# A batch of more records than this is written by COPY (a backlog's batches: COPY streams
# them); fewer go with the threads and sessions, in the statement that writes those (a
# COPY is two round trips of its own).
COPY_FROM = 64
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
# The threads', the sessions' and the view estimates' writes ($1-$12).
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
# With a batch's records, their columns as arrays after those ($13 on).
_INSERT_RECORDS = (
    f"inserted AS (INSERT INTO records ({', '.join(RECORD_COLUMNS)}) SELECT * FROM unnest("
    + ", ".join(f"${13 + i}::{RECORD_TYPES[c]}[]" for i, c in enumerate(RECORD_COLUMNS))
    + ") RETURNING 1),"
)


def _tracked(first: int) -> str:
    """The tracking rows' upsert as a statement's last CTE, and the statement's result:
    the notification (delivered at commit) that wakes Prepare's read-your-writes waiters
    without polling, the offsets in it. Its arguments from ``$first``: the consumer, the
    topic, the partitions, their next offsets, the channel and the note."""
    a = [f"${first + i}" for i in range(6)]
    return (
        " tracked AS (INSERT INTO consumer_offsets (consumer, topic, partition, next_offset)"
        f" SELECT {a[0]}, {a[1]}, t.p, t.o FROM unnest({a[2]}::integer[], {a[3]}::bigint[])"
        " AS t(p, o) ON CONFLICT (consumer, topic, partition) DO UPDATE SET"
        " next_offset = GREATEST(consumer_offsets.next_offset, EXCLUDED.next_offset),"
        f" updated_at = now() RETURNING 1) SELECT pg_notify({a[4]}, {a[5]})"
    )


@functools.cache
def _batch_sql(records: bool, offsets: bool) -> str:
    """The threads', sessions' and estimates' statement: with the records (``records``),
    and with the tracking rows and their notification (``offsets``, arguments after all
    others). Every part is a data-modifying CTE: each runs, whatever the result reads."""
    first = 13 + (len(RECORD_COLUMNS) if records else 0)
    body = (_INSERT_RECORDS if records else "") + _THREADS_AND_SESSIONS
    return "WITH " + body + ("," + _tracked(first) if offsets else " SELECT 1")


async def write_plan(
    conn: asyncpg.Connection,
    plan: BatchPlan,
    states: dict[str, SessionState],
    consumer: str,
    topic: str,
    next_offsets: dict[int, int],
) -> None:
    """Write the whole plan; the caller holds the transaction opened by
    ``storage.records.session_states.load_states``. (The session rows are locked and keys
    were checked under that lock, so the records cannot hit a duplicate; if they ever
    did, the transaction fails and the batch is retried, never half-applied.)"""
    await _write_runs(conn, plan)
    rows = list(record_rows(plan))
    if len(rows) > COPY_FROM:
        await conn.copy_records_to_table("records", records=rows, columns=RECORD_COLUMNS)
        rows = []
    tracked = (consumer, topic, next_offsets) if next_offsets else None
    if not await _write_threads_and_sessions(conn, plan, states, rows, tracked):
        await write_offsets(conn, consumer, topic, next_offsets)
    await _write_rejections(conn, plan)


async def _write_runs(conn: asyncpg.Connection, plan: BatchPlan) -> None:
    """The batch's new runs (each with its snapshot) in one statement, then their changes
    in another."""
    if plan.new_runs:
        runs = plan.new_runs
        await conn.execute(
            "WITH x AS (INSERT INTO history_snapshots (session_id, run_id,"
            " through_session_sequence, policy_revision, user_turns, model_steps)"
            " SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[],"
            " $5::bigint[], $6::bigint[]) RETURNING snapshot_id, session_id, run_id)"
            " INSERT INTO runs (session_id, run_id, main_instance_id, status, snapshot_id,"
            " started_sequence) SELECT x.session_id, x.run_id, n.main, 'active',"
            " x.snapshot_id, n.started FROM x JOIN unnest($1::text[], $2::text[], $7::text[],"
            " $8::bigint[]) AS n(sid, rid, main, started)"
            " ON n.sid = x.session_id AND n.rid = x.run_id",
            [r.session_id for r in runs],
            [r.run_id for r in runs],
            [r.through_session_sequence for r in runs],
            [r.policy_revision for r in runs],
            [r.user_turns for r in runs],
            [r.model_steps for r in runs],
            [r.main_instance_id for r in runs],
            [r.started_sequence for r in runs],
        )
    # Each change is the run's whole state after it: the last one of a run is its state
    # after the batch (one statement updates a row once), and whether the batch reopened
    # it (a resume) tells whether an end in the batch is a new one.
    changes = list({(c.session_id, c.run_id): c for c in plan.run_changes}.values())
    reopened = {(c.session_id, c.run_id) for c in plan.run_changes if c.status == "active"}
    if changes:
        # A refused resume changes only the counters: its run keeps its ended_at.
        await conn.execute(
            "UPDATE runs SET status = c.status, ended_at = CASE WHEN c.status = 'active'"
            " THEN NULL WHEN runs.status = c.status AND NOT c.reopened THEN runs.ended_at"
            " ELSE now() END, resumes = c.resumes, ends = c.ends, refused_resumes = c.refused"
            " FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::integer[],"
            " $6::integer[], $7::boolean[]) AS c(sid, rid, status, resumes, ends, refused,"
            " reopened) WHERE runs.session_id = c.sid AND runs.run_id = c.rid",
            [c.session_id for c in changes],
            [c.run_id for c in changes],
            [c.status for c in changes],
            [c.resumes for c in changes],
            [c.ends for c in changes],
            [c.refused_resumes for c in changes],
            [(c.session_id, c.run_id) in reopened for c in changes],
        )


async def _write_threads_and_sessions(
    conn: asyncpg.Connection,
    plan: BatchPlan,
    states: dict[str, SessionState],
    records: list[tuple[Any, ...]],
    tracked: tuple[str, str, dict[int, int]] | None = None,
) -> bool:
    """The threads the plan touched (upserted), its sessions' counters and sequences, and
    their main views' token estimates grown by the records just stored, in one statement
    (two round trips less per batch), with ``records`` (rows in ``RECORD_COLUMNS``' order)
    when there are any, and ``tracked``'s consumer offsets and notification (one round
    trip less). False when there was nothing to write: nothing was, ``tracked`` neither."""
    touched_threads = {(s, r, i) for (s, r, i) in plan.new_threads}
    for nr in plan.records:
        ev = nr.incoming.event
        if ev.scope.run_id and ev.scope.instance_id:
            touched_threads.add((ev.scope.session_id, ev.scope.run_id, ev.scope.instance_id))
    threads = sorted(touched_threads)
    changed = (
        plan.touched_sessions
        | {r.session_id for r in plan.new_runs}
        | {c.session_id for c in plan.run_changes}
    )
    sessions = [states[x] for x in sorted(changed)]
    if not threads and not sessions and not records:
        return False
    grow = sorted(_view_growth(plan, states).items())
    columns = [list(c) for c in zip(*records, strict=True)] if records else []
    await conn.execute(
        _batch_sql(bool(records), tracked is not None),
        [s for s, _, _ in threads],
        [r for _, r, _ in threads],
        [i for _, _, i in threads],
        [states[s].threads[(r, i)] for s, r, i in threads],
        [x.session_id for x in sessions],
        [x.next_session_sequence for x in sessions],
        [x.active_run_id for x in sessions],
        [x.revision for x in sessions],
        [x.user_turns for x in sessions],
        [x.model_steps for x in sessions],
        [sid for sid, _ in grow],
        [t for _, t in grow],
        *columns,
        *(_tracking_args(*tracked) if tracked is not None else ()),
    )
    return True


async def _write_rejections(conn: asyncpg.Connection, plan: BatchPlan) -> None:
    # Only refusals of events whose scope checked out (outcomes.write_scoped): a key
    # claimed under a wrong scope must not poison the real session's key.
    await outcomes.write_scoped(
        conn,
        [
            RefusedEvent(
                r.incoming.event.scope.session_id,
                r.incoming.event.event_key,
                r.code,
                r.message,
                r.incoming.event.scope.space_id,
                r.incoming.event.scope.actor_id,
                "dead_letter" if r.dead_letter else "rejected",
            )
            for r in plan.rejections
        ],
    )


async def write_offsets(
    conn: asyncpg.Connection, consumer: str, topic: str, next_offsets: dict[int, int]
) -> None:
    """The tracking rows and their notification in one round trip (a batch's records
    take them in their own statement: ``write_plan``)."""
    if not next_offsets:
        return
    await conn.execute("WITH" + _tracked(1), *_tracking_args(consumer, topic, next_offsets))


def _tracking_args(consumer: str, topic: str, next_offsets: dict[int, int]) -> tuple[Any, ...]:
    """``_tracked``'s arguments, in its order."""
    parts = sorted(next_offsets.items())
    note = commit_note(consumer, topic, next_offsets)
    return consumer, topic, [p for p, _ in parts], [o for _, o in parts], NOTIFY_CHANNEL, note


# Records that render nothing in a view (lifecycle markers, retractions).
_INVISIBLE = frozenset(
    {
        "run_started",
        "run_resumed",
        "run_finished",
        "record_retracted",
        "plan_updated",  # rendered as the frontier's blocks, not as history
        "constraint_set",
        "constraint_retired",
    }
)
_ENVELOPE = 4  # per message; the next observation resyncs any drift


def _view_growth(plan: BatchPlan, states: dict[str, SessionState]) -> dict[str, int]:
    """How much each session's main-view estimate grows by the records just stored."""
    grow: dict[str, int] = {}
    for nr in plan.records:
        ev = nr.incoming.event
        if str(ev.kind) in _INVISIBLE:
            continue
        st = states[ev.scope.session_id]
        run = st.runs.get(ev.scope.run_id or "")
        if ev.scope.instance_id is not None and (
            run is None or run.main_instance_id != ev.scope.instance_id
        ):
            continue  # child threads have views of their own
        grow[st.session_id] = grow.get(st.session_id, 0) + nr.incoming.token_count + _ENVELOPE
    return grow
