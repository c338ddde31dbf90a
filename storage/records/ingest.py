"""The session processor's writes: a planned batch in the transaction that loaded its
sessions (``storage.records.session_states``) — records, runs, snapshots, threads,
outcomes, consumer offsets — and the notification that wakes waiting readers."""

from __future__ import annotations

from typing import Any

import asyncpg

from domain.planning.state import BatchPlan, SessionState
from domain.record_rows import RECORD_COLUMNS, record_rows
from storage.records import batch_sql, outcomes
from storage.records.outcomes import RefusedEvent

# A batch of more records than this is written by COPY (a backlog's batches: COPY streams
# them); fewer go with the threads and sessions, in the statement that writes those (a
# COPY is two round trips of its own).
COPY_FROM = 64


async def write_plan(
    conn: asyncpg.Connection,
    plan: BatchPlan,
    states: dict[str, SessionState],
    consumer: str,
    topic: str,
    next_offsets: dict[int, int],
) -> None:
    """Write the whole plan in one statement (``batch_sql``): a backlog's records go by
    COPY before it, and a change of a run the batch starts after it. The caller holds the
    transaction opened by ``storage.records.session_states.load_states``. (The session
    rows are locked and keys were checked under that lock, so the records cannot hit a
    duplicate; if they ever did, the transaction fails and the batch is retried, never
    half-applied.)"""
    rows = list(record_rows(plan))
    if len(rows) > COPY_FROM:
        await conn.copy_records_to_table("records", records=rows, columns=RECORD_COLUMNS)
        rows = []
    changes = batch_sql.run_changes(plan)
    # A change of a run this batch starts is written once the run is.
    new = {(r.session_id, r.run_id) for r in plan.new_runs}
    later = any((c.session_id, c.run_id) in new for c, _ in changes)
    tracked = (consumer, topic, next_offsets) if next_offsets else None
    if not await _write_batch(conn, plan, states, rows, [] if later else changes, tracked):
        await batch_sql.write_offsets(conn, consumer, topic, next_offsets)
    if later:
        await conn.execute(
            batch_sql.alone(batch_sql.changes_cte(1)), *batch_sql.change_args(changes)
        )
    await _write_rejections(conn, plan)


async def _write_batch(
    conn: asyncpg.Connection,
    plan: BatchPlan,
    states: dict[str, SessionState],
    records: list[tuple[Any, ...]],
    changes: batch_sql.Changes,
    tracked: tuple[str, str, dict[int, int]] | None,
) -> bool:
    """The threads the plan touched (upserted), its sessions' counters and sequences and
    their main views' token estimates grown by the records just stored, with ``records``
    (rows in ``RECORD_COLUMNS``' order), the new runs, ``changes`` and ``tracked``'s
    consumer offsets and notification: one statement (``batch_sql``). False when there
    was nothing to write: nothing was, ``tracked`` neither."""
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
    statement = batch_sql.batch_sql(
        bool(records), bool(plan.new_runs), bool(changes), tracked is not None
    )
    await conn.execute(
        statement,
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
        *(batch_sql.new_run_args(plan) if plan.new_runs else ()),
        *(batch_sql.change_args(changes) if changes else ()),
        *(batch_sql.tracking_args(*tracked) if tracked is not None else ()),
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
                (r.incoming.partition, r.incoming.offset),
            )
            for r in plan.rejections
        ],
    )


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
