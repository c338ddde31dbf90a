"""The session processor's storage: load touched sessions under row locks, write a
planned batch in the same transaction (records, runs, snapshots, threads, outcomes,
consumer offsets), and notify waiting readers."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from domain.planning.state import BatchPlan, RunState, SessionState
from domain.record_rows import RECORD_COLUMNS, record_rows
from storage.records import frontier, outcomes, retraction
from storage.records.outcomes import NOT_BINDING, RefusedEvent

NOTIFY_CHANNEL = "ctx_committed"


@dataclass(frozen=True)
class ExistingRecord:
    record_id: str
    session_id: str
    session_sequence: int
    run_id: str | None
    instance_id: str | None
    instance_sequence: int | None
    event_key: str
    kind: str
    token_count: int
    token_method: str
    content_sha256: str


async def load_states(
    conn: asyncpg.Connection,
    keys: dict[str, set[str]],
    operations: dict[str, set[tuple[str, str]]],
    scopes: dict[str, set[tuple[str, str | None]]],
) -> tuple[dict[str, SessionState], dict[tuple[str, str], ExistingRecord]]:
    """Lock and load the sessions named in ``keys`` (session_id -> event_keys seen in the
    batch). Returns states plus the already-committed records among those keys.
    ``scopes`` (session_id -> the (run_id, instance_id) the batch's events name) limits
    the runs and threads loaded to those: planning looks up no other, and a session of
    a thousand runs would otherwise load them all for every batch."""
    states = await _lock_sessions(conn, keys)
    if not states:
        return states, {}
    present = list(states)
    await _load_runs_and_threads(conn, states, scopes)
    existing = await _load_known_keys(conn, states, present, keys)
    await _load_known_operations(conn, states, present, operations)
    await retraction.load_targets(conn, states, operations)
    await frontier.load_constraint_ids(conn, states, operations)
    return states, existing


async def _lock_sessions(
    conn: asyncpg.Connection, keys: dict[str, set[str]]
) -> dict[str, SessionState]:
    """The batch's sessions, locked in id order (no deadlock between processors)."""
    ids = sorted(keys)
    rows = await conn.fetch(
        "SELECT s.*, r.policy_revision FROM sessions s JOIN releases r USING (release_id)"
        " WHERE s.session_id = ANY($1::text[]) ORDER BY s.session_id FOR UPDATE OF s",
        ids,
    )
    states: dict[str, SessionState] = {}
    for r in rows:
        states[r["session_id"]] = SessionState(
            session_id=r["session_id"],
            space_id=r["space_id"],
            actor_id=r["actor_id"],
            policy_revision=r["policy_revision"],
            next_session_sequence=r["next_session_sequence"],
            active_run_id=r["active_run_id"],
            revision=r["revision"],
            user_turns=r["user_turns"],
            model_steps=r["model_steps"],
        )
    return states


def _add_run(states: dict[str, SessionState], r: asyncpg.Record) -> None:
    states[r["session_id"]].runs[r["run_id"]] = RunState(
        r["run_id"], r["main_instance_id"], r["status"], r["resumes"], r["ends"],
        r["refused_resumes"],
    )  # fmt: skip


def _add_thread(states: dict[str, SessionState], r: asyncpg.Record) -> None:
    states[r["session_id"]].threads[(r["run_id"], r["instance_id"])] = r["next_instance_sequence"]


async def _load_runs_and_threads(
    conn: asyncpg.Connection,
    states: dict[str, SessionState],
    scopes: dict[str, set[tuple[str, str | None]]],
) -> None:
    named = sorted((s, r, i) for s in states for r, i in scopes.get(s, ()))
    runs = sorted({(s, r) for s, r, _ in named})
    threads = [(s, r, i) for s, r, i in named if i is not None]
    if runs:
        for r in await conn.fetch(
            "SELECT u.session_id, u.run_id, u.main_instance_id, u.status, u.resumes, u.ends,"
            " u.refused_resumes FROM runs u JOIN unnest($1::text[], $2::text[])"
            " AS k(session_id, run_id) USING (session_id, run_id)",
            [s for s, _ in runs],
            [r for _, r in runs],
        ):
            _add_run(states, r)
    if threads:
        for r in await conn.fetch(
            "SELECT t.session_id, t.run_id, t.instance_id, t.next_instance_sequence"
            " FROM threads t JOIN unnest($1::text[], $2::text[], $3::text[])"
            " AS k(session_id, run_id, instance_id) USING (session_id, run_id, instance_id)",
            [s for s, _, _ in threads],
            [r for _, r, _ in threads],
            [i for _, _, i in threads],
        ):
            _add_thread(states, r)


async def _load_known_keys(
    conn: asyncpg.Connection,
    states: dict[str, SessionState],
    present: list[str],
    keys: dict[str, set[str]],
) -> dict[tuple[str, str], ExistingRecord]:
    """Committed records among the batch's keys, and refused keys (which stay refused)."""
    sess, evk = [], []
    for sid in present:
        for k in keys[sid]:
            sess.append(sid)
            evk.append(k)
    existing: dict[tuple[str, str], ExistingRecord] = {}
    for r in await conn.fetch(
        "SELECT r.record_id, r.session_id, r.session_sequence, r.run_id, r.instance_id,"
        " r.instance_sequence, r.event_key, r.kind, r.token_count, r.token_method,"
        " r.content_sha256 FROM records r"
        " JOIN unnest($1::text[], $2::text[]) AS k(sid, ek)"
        "   ON r.session_id = k.sid AND r.event_key = k.ek",
        sess,
        evk,
    ):
        existing[(r["session_id"], r["event_key"])] = ExistingRecord(**dict(r))
        states[r["session_id"]].known_keys.add(r["event_key"])
    # Refused/dead-lettered keys stay refused on redelivery (an authentication refusal
    # binds nothing: storage.records.outcomes).
    for r in await conn.fetch(
        "SELECT o.session_id, o.event_key FROM event_outcomes o"
        " JOIN unnest($1::text[], $2::text[]) AS k(sid, ek)"
        "   ON o.session_id = k.sid AND o.event_key = k.ek WHERE NOT o.code = ANY($3::text[])",
        sess,
        evk,
        sorted(NOT_BINDING),
    ):
        states[r["session_id"]].known_keys.add(r["event_key"])
    return existing


async def _load_known_operations(
    conn: asyncpg.Connection,
    states: dict[str, SessionState],
    present: list[str],
    operations: dict[str, set[tuple[str, str]]],
) -> None:
    op_s, op_id, op_kind = [], [], []
    for sid in present:
        for op, kind in operations.get(sid, ()):
            op_s.append(sid)
            op_id.append(op)
            op_kind.append(kind)
    if op_s:
        for r in await conn.fetch(
            "SELECT r.session_id, r.operation_id, r.kind FROM records r"
            " JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(sid, op, kind)"
            "   ON r.session_id = k.sid AND r.operation_id = k.op AND r.kind = k.kind",
            op_s,
            op_id,
            op_kind,
        ):
            states[r["session_id"]].known_operations.add((r["operation_id"], r["kind"]))


async def write_plan(
    conn: asyncpg.Connection,
    plan: BatchPlan,
    states: dict[str, SessionState],
    consumer: str,
    topic: str,
    next_offsets: dict[int, int],
) -> None:
    """Write the whole plan; the caller holds the transaction opened by ``load_states``."""
    await _write_runs(conn, plan)
    if plan.records:
        # The session rows are locked and keys were checked under that lock, so COPY
        # cannot hit a duplicate; if it ever did, the transaction fails and the batch is
        # retried, never half-applied.
        await conn.copy_records_to_table(
            "records", records=list(record_rows(plan)), columns=RECORD_COLUMNS
        )
    await _write_threads(conn, plan, states)
    await _write_sessions(conn, plan, states)
    await _write_rejections(conn, plan)
    await write_offsets(conn, consumer, topic, next_offsets)


async def _write_runs(conn: asyncpg.Connection, plan: BatchPlan) -> None:
    for run in plan.new_runs:
        snap_id = await conn.fetchval(
            "INSERT INTO history_snapshots (session_id, run_id, through_session_sequence,"
            " policy_revision, user_turns, model_steps) VALUES ($1,$2,$3,$4,$5,$6)"
            " RETURNING snapshot_id",
            run.session_id,
            run.run_id,
            run.through_session_sequence,
            run.policy_revision,
            run.user_turns,
            run.model_steps,
        )
        await conn.execute(
            "INSERT INTO runs (session_id, run_id, main_instance_id, status, snapshot_id,"
            " started_sequence) VALUES ($1,$2,$3,'active',$4,$5)",
            run.session_id,
            run.run_id,
            run.main_instance_id,
            snap_id,
            run.started_sequence,
        )
    for ch in plan.run_changes:
        # A refused resume changes only the counters: its run keeps its ended_at.
        await conn.execute(
            "UPDATE runs SET status=$3, ended_at = CASE WHEN $3='active' THEN NULL"
            " WHEN runs.status = $3 THEN runs.ended_at ELSE now() END,"
            " resumes=$4, ends=$5, refused_resumes=$6 WHERE session_id=$1 AND run_id=$2",
            ch.session_id,
            ch.run_id,
            ch.status,
            ch.resumes,
            ch.ends,
            ch.refused_resumes,
        )


async def _write_threads(
    conn: asyncpg.Connection, plan: BatchPlan, states: dict[str, SessionState]
) -> None:
    touched_threads = {(s, r, i) for (s, r, i) in plan.new_threads}
    for nr in plan.records:
        ev = nr.incoming.event
        if ev.scope.run_id and ev.scope.instance_id:
            touched_threads.add((ev.scope.session_id, ev.scope.run_id, ev.scope.instance_id))
    if touched_threads:
        rows = [(s, r, i, states[s].threads[(r, i)]) for (s, r, i) in sorted(touched_threads)]
        await conn.executemany(
            "INSERT INTO threads (session_id, run_id, instance_id, next_instance_sequence,"
            " revision) VALUES ($1,$2,$3,$4::bigint,$4::bigint-1)"
            " ON CONFLICT (session_id, run_id, instance_id)"
            " DO UPDATE SET next_instance_sequence = EXCLUDED.next_instance_sequence,"
            " revision = EXCLUDED.revision",
            rows,
        )


async def _write_sessions(
    conn: asyncpg.Connection, plan: BatchPlan, states: dict[str, SessionState]
) -> None:
    changed = (
        plan.touched_sessions
        | {r.session_id for r in plan.new_runs}
        | {c.session_id for c in plan.run_changes}
    )
    if changed:
        await conn.executemany(
            "UPDATE sessions SET next_session_sequence=$2, active_run_id=$3, revision=$4,"
            " user_turns=$5, model_steps=$6 WHERE session_id=$1",
            [
                (
                    s.session_id,
                    s.next_session_sequence,
                    s.active_run_id,
                    s.revision,
                    s.user_turns,
                    s.model_steps,
                )
                for s in (states[x] for x in sorted(changed))
            ],
        )


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
    if not next_offsets:
        return
    await conn.executemany(
        "INSERT INTO consumer_offsets (consumer, topic, partition, next_offset)"
        " VALUES ($1,$2,$3,$4) ON CONFLICT (consumer, topic, partition) DO UPDATE SET"
        " next_offset = GREATEST(consumer_offsets.next_offset, EXCLUDED.next_offset),"
        " updated_at = now()",
        [(consumer, topic, p, o) for p, o in sorted(next_offsets.items())],
    )
    # Delivered at commit: Prepare's read-your-writes waiters wake without polling.
    await conn.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, topic)


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


async def grow_view_tokens(
    conn: asyncpg.Connection, plan: BatchPlan, states: dict[str, SessionState]
) -> None:
    """Keep each session's main-view estimate current from the counts just stored."""
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
    if grow:
        # One statement for the whole batch: most sessions have no compaction state yet
        # (no prepare seen), and a per-session UPDATE would cost a round trip each.
        sids, tokens = zip(*sorted(grow.items()), strict=True)
        await conn.execute(
            "UPDATE compaction_state c SET view_tokens = c.view_tokens + d.t"
            " FROM unnest($1::text[], $2::bigint[]) AS d(sid, t)"
            " WHERE c.session_id = d.sid AND c.lineage = 'main'",
            list(sids),
            list(tokens),
        )
