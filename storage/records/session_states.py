"""The touched sessions of a batch, loaded under row locks for planning
(``domain.planning``): each session's counters and sequences, the runs and threads the
batch names, the event keys and operations it already holds (with the records they
committed), the targets its retractions name and the constraints it set. The caller holds
the transaction, and writes the plan in it (``storage.records.ingest``).

The locks and the reads are one statement (``_LOAD``). Its reads see the snapshot the
statement started with, and a lock that waited for another transaction returns the row
as that transaction left it: when a locked row is newer than the snapshot's (another
processor, a zombie of a rebalance, committed to the session meanwhile), the reads are
made again under the locks, each in a statement of its own."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from domain.planning.state import DeadLettered, RunState, SessionState
from storage.records import frontier, retraction
from storage.records.outcomes import NOT_BINDING


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


# A session's columns, in ``SessionState``'s order (``_session``).
_SESSION_COLUMNS = (
    "session_id, space_id, actor_id, policy_revision, next_session_sequence, active_run_id,"
    " revision, user_turns, model_steps"
)
_LOCK = (
    "SELECT s.*, s.xmin AS locked_xmin, r.policy_revision FROM sessions s"
    " JOIN releases r USING (release_id) WHERE s.session_id = ANY($1::text[])"
    " ORDER BY s.session_id FOR UPDATE OF s"  # in id order: no deadlock between processors
)


@functools.cache
def _runs_and_threads(p: tuple[str, ...]) -> str:
    """The runs, then the threads (``what``), their columns side by side, in
    ``_add_runs_and_threads``' order; ``p``: the placeholders of the runs' session
    and run ids, then the threads' session, run and instance ids.

    Each key is looked up by its primary key (LATERAL ... OFFSET 0 keeps the lookup per
    key): joined as a set, a generic plan (the keys' count unknown) hashed every row of
    both tables instead, ~0.9 ms a batch at 1,000 runs and growing."""
    return (
        "SELECT 'run' AS what, u.session_id, u.run_id, u.main_instance_id, u.status,"
        " u.resumes, u.ends, u.refused_resumes, NULL::text AS instance_id,"
        " NULL::bigint AS next_instance_sequence"
        f" FROM unnest({p[0]}::text[], {p[1]}::text[]) AS k(session_id, run_id)"
        " CROSS JOIN LATERAL (SELECT * FROM runs x WHERE x.session_id = k.session_id"
        "   AND x.run_id = k.run_id OFFSET 0) u"
        " UNION ALL SELECT 'thread', t.session_id, t.run_id, NULL, NULL, NULL, NULL, NULL,"
        " t.instance_id, t.next_instance_sequence"
        f" FROM unnest({p[2]}::text[], {p[3]}::text[], {p[4]}::text[])"
        " AS k(session_id, run_id, instance_id)"
        " CROSS JOIN LATERAL (SELECT * FROM threads x WHERE x.session_id = k.session_id"
        "   AND x.run_id = k.run_id AND x.instance_id = k.instance_id OFFSET 0) t"
    )


@functools.cache
def _known(p: tuple[str, ...]) -> str:
    """Each key's committed record, if any, whether it was refused (refused and
    dead-lettered keys stay refused on redelivery; an authentication refusal binds
    nothing: ``storage.records.outcomes``) and its dead letter (``DeadLettered``'s fields, as
    text), if one was published for a message of the records topic; then (``op``) each
    operation committed. In ``_add_known``'s order; ``p``: the placeholders of the keys'
    session ids and keys, the codes that bind nothing, the operations' session ids, ids
    and kinds. Each key is looked up by its index (as in ``_runs_and_threads``: a generic
    plan joined the keys as a set by scanning the records, ~2 ms a batch at 8 agents'
    sessions)."""
    return (
        "SELECT false AS op, k.sid, k.ek, r.record_id, r.session_sequence, r.run_id,"
        " r.instance_id, r.instance_sequence, r.kind, r.token_count, r.token_method,"
        " r.content_sha256, o.refused IS NOT NULL AS refused, o.letter,"
        f" NULL AS operation_id FROM unnest({p[0]}::text[], {p[1]}::text[]) AS k(sid, ek)"
        " LEFT JOIN LATERAL (SELECT x.record_id, x.session_sequence, x.run_id, x.instance_id,"
        "   x.instance_sequence, x.kind, x.token_count, x.token_method, x.content_sha256"
        "   FROM records x WHERE x.session_id = k.sid AND x.event_key = k.ek OFFSET 0) r ON true"
        " LEFT JOIN LATERAL (SELECT true AS refused, CASE WHEN x.outcome = 'dead_letter'"
        "   AND x.source_offset IS NOT NULL THEN ARRAY[x.code, x.message,"
        "   x.source_partition::text, x.source_offset::text] END AS letter FROM event_outcomes x"
        f"   WHERE x.session_id = k.sid AND x.event_key = k.ek AND NOT x.code = ANY({p[2]}::text[])"
        "   LIMIT 1) o ON true"
        " UNION ALL SELECT true, k.sid, NULL, NULL, NULL, NULL, NULL, NULL, k.kind,"
        " NULL, NULL, NULL, false, NULL::text[], k.op"
        f" FROM unnest({p[3]}::text[], {p[4]}::text[], {p[5]}::text[]) AS k(sid, op, kind)"
        " CROSS JOIN LATERAL (SELECT 1 FROM records x WHERE x.session_id = k.sid"
        "   AND x.operation_id = k.op AND x.kind = k.kind AND x.operation_id IS NOT NULL"
        "   OFFSET 0) r"
    )


def _placeholders(first: int, n: int) -> tuple[str, ...]:
    return tuple(f"${i}" for i in range(first, first + n))


# The locks and every read in one round trip: each part an array of its rows. ``stale``:
# a locked row is newer than the snapshot the reads saw (see the module's docstring).
_LOAD = (
    f"WITH locked AS MATERIALIZED ({_LOCK})"
    f" SELECT ARRAY(SELECT ROW({_SESSION_COLUMNS}) FROM locked ORDER BY session_id) AS sessions,"
    " EXISTS (SELECT 1 FROM locked l JOIN sessions x USING (session_id)"
    "   WHERE x.xmin <> l.locked_xmin) AS stale,"
    f" ARRAY(SELECT q FROM ({_runs_and_threads(_placeholders(2, 5))}) q) AS runs,"
    f" ARRAY(SELECT q FROM ({_known(_placeholders(7, 6))}) q) AS known"
)


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
    if not keys:
        return {}, {}
    runs, threads = _named_scopes(keys, scopes)
    named, ops = _named_keys(keys, operations)
    row = await conn.fetchrow(
        _LOAD,
        sorted(keys),
        *_runs_args(runs, threads),
        *_known_args(named, ops),
    )
    states = {r[0]: _session(r) for r in row["sessions"]}
    if not states:
        return states, {}
    if row["stale"]:
        await _load_runs_and_threads(conn, states, scopes)
        existing = await _load_known(conn, states, keys, operations)
    else:
        _add_runs_and_threads(states, row["runs"])
        existing = _add_known(states, row["known"])
    await retraction.load_targets(conn, states, operations)
    await frontier.load_constraint_ids(conn, states, operations)
    return states, existing


def _session(r: Sequence[Any]) -> SessionState:
    return SessionState(*r)


def _named_scopes(
    sessions: dict[str, Any], scopes: dict[str, set[tuple[str, str | None]]]
) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """The runs, and the threads, the batch names in ``sessions``."""
    named = sorted((s, r, i) for s in sessions for r, i in scopes.get(s, ()))
    runs = sorted({(s, r) for s, r, _ in named})
    return runs, [(s, r, i) for s, r, i in named if i is not None]


def _runs_args(runs: list[tuple[str, str]], threads: list[tuple[str, str, str]]) -> list[Any]:
    return [
        [s for s, _ in runs],
        [r for _, r in runs],
        [s for s, _, _ in threads],
        [r for _, r, _ in threads],
        [i for _, _, i in threads],
    ]


def _named_keys(
    keys: dict[str, set[str]], operations: dict[str, set[tuple[str, str]]]
) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """The batch's (session, event key) pairs and (session, operation, kind) triples."""
    named = [(sid, k) for sid in keys for k in keys[sid]]
    ops = [(sid, op, kind) for sid in keys for op, kind in operations.get(sid, ())]
    return named, ops


def _known_args(named: list[tuple[str, str]], ops: list[tuple[str, str, str]]) -> list[Any]:
    return [
        [sid for sid, _ in named],
        [k for _, k in named],
        sorted(NOT_BINDING),
        [sid for sid, _, _ in ops],
        [op for _, op, _ in ops],
        [kind for _, _, kind in ops],
    ]


async def _load_runs_and_threads(
    conn: asyncpg.Connection,
    states: dict[str, SessionState],
    scopes: dict[str, set[tuple[str, str | None]]],
) -> None:
    runs, threads = _named_scopes(states, scopes)
    if runs:
        sql = _runs_and_threads(_placeholders(1, 5))
        _add_runs_and_threads(states, await conn.fetch(sql, *_runs_args(runs, threads)))


async def _load_known(
    conn: asyncpg.Connection,
    states: dict[str, SessionState],
    keys: dict[str, set[str]],
    operations: dict[str, set[tuple[str, str]]],
) -> dict[tuple[str, str], ExistingRecord]:
    named, ops = _named_keys({s: keys[s] for s in states}, operations)
    rows = await conn.fetch(_known(_placeholders(1, 6)), *_known_args(named, ops))
    return _add_known(states, rows)


def _add_runs_and_threads(states: dict[str, SessionState], rows: Sequence[Any]) -> None:
    """Rows of ``_runs_and_threads``, of sessions in ``states`` (the others are unknown)."""
    for r in rows:
        state = states.get(r[1])
        if state is None:
            continue
        if r[0] == "run":
            state.runs[r[2]] = RunState(r[2], r[3], r[4], r[5], r[6], r[7])
        else:
            state.threads[(r[2], r[8])] = r[9]


def _add_known(
    states: dict[str, SessionState], rows: Sequence[Any]
) -> dict[tuple[str, str], ExistingRecord]:
    """Rows of ``_known``, of sessions in ``states``: the keys and operations each
    session holds, and the records committed under the keys."""
    existing: dict[tuple[str, str], ExistingRecord] = {}
    for op, sid, key, record_id, *facts, refused, letter, operation_id in rows:
        state = states.get(sid)
        if state is None:
            continue
        if op:
            state.known_operations.add((operation_id, facts[4]))
            continue
        if record_id is not None:
            existing[(sid, key)] = ExistingRecord(record_id, sid, facts[0], facts[1], facts[2],
                                                  facts[3], key, *facts[4:])  # fmt: skip
        if record_id is not None or refused:
            state.known_keys.add(key)
        if letter is not None:
            code, message, partition, offset = letter
            state.dead_lettered[key] = DeadLettered(code, message, int(partition), int(offset))
    return existing
