"""The touched sessions of a batch, loaded under row locks for planning
(``domain.planning``): each session's counters and sequences, the runs and threads the
batch names, the event keys and operations it already holds (with the records they
committed), the targets its retractions name and the constraints it set. The caller holds
the transaction, and writes the plan in it (``storage.records.ingest``)."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from domain.planning.state import RunState, SessionState
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
    existing = await _load_known(conn, states, present, keys, operations)
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
    if not runs:
        return
    # One round trip: the runs, then the threads (``what``), their columns side by side.
    # Each key is looked up by its primary key (LATERAL ... OFFSET 0 keeps the lookup per
    # key): joined as a set, a generic plan (the keys' count unknown) hashed every row of
    # both tables instead, ~0.9 ms a batch at 1,000 runs and growing.
    for r in await conn.fetch(
        "SELECT 'run' AS what, u.session_id, u.run_id, u.main_instance_id, u.status,"
        " u.resumes, u.ends, u.refused_resumes, NULL::text AS instance_id,"
        " NULL::bigint AS next_instance_sequence"
        " FROM unnest($1::text[], $2::text[]) AS k(session_id, run_id)"
        " CROSS JOIN LATERAL (SELECT * FROM runs x WHERE x.session_id = k.session_id"
        "   AND x.run_id = k.run_id OFFSET 0) u"
        " UNION ALL SELECT 'thread', t.session_id, t.run_id, NULL, NULL, NULL, NULL, NULL,"
        " t.instance_id, t.next_instance_sequence"
        " FROM unnest($3::text[], $4::text[], $5::text[]) AS k(session_id, run_id, instance_id)"
        " CROSS JOIN LATERAL (SELECT * FROM threads x WHERE x.session_id = k.session_id"
        "   AND x.run_id = k.run_id AND x.instance_id = k.instance_id OFFSET 0) t",
        [s for s, _ in runs],
        [r for _, r in runs],
        [s for s, _, _ in threads],
        [r for _, r, _ in threads],
        [i for _, _, i in threads],
    ):
        if r["what"] == "run":
            _add_run(states, r)
        else:
            _add_thread(states, r)


async def _load_known(
    conn: asyncpg.Connection,
    states: dict[str, SessionState],
    present: list[str],
    keys: dict[str, set[str]],
    operations: dict[str, set[tuple[str, str]]],
) -> dict[tuple[str, str], ExistingRecord]:
    """Committed records among the batch's keys, refused keys (which stay refused), and
    the operations the batch names that are already committed, in one round trip."""
    named = [(sid, k) for sid in present for k in keys[sid]]
    ops = [(sid, op, kind) for sid in present for op, kind in operations.get(sid, ())]
    existing: dict[tuple[str, str], ExistingRecord] = {}
    # Each key's committed record, if any, and whether it was refused (refused and
    # dead-lettered keys stay refused on redelivery; an authentication refusal binds
    # nothing: storage.records.outcomes); then (``op``) each operation committed. Each
    # key is looked up by its index (``_load_runs_and_threads``: a generic plan joined
    # the keys as a set by scanning the records, ~2 ms a batch at 8 agents' sessions).
    for r in await conn.fetch(
        "SELECT false AS op, k.sid, k.ek, r.record_id, r.session_sequence, r.run_id,"
        " r.instance_id, r.instance_sequence, r.kind, r.token_count, r.token_method,"
        " r.content_sha256, o.refused IS NOT NULL AS refused,"
        " NULL AS operation_id FROM unnest($1::text[], $2::text[]) AS k(sid, ek)"
        " LEFT JOIN LATERAL (SELECT x.record_id, x.session_sequence, x.run_id, x.instance_id,"
        "   x.instance_sequence, x.kind, x.token_count, x.token_method, x.content_sha256"
        "   FROM records x WHERE x.session_id = k.sid AND x.event_key = k.ek OFFSET 0) r ON true"
        " LEFT JOIN LATERAL (SELECT true AS refused FROM event_outcomes x"
        "   WHERE x.session_id = k.sid AND x.event_key = k.ek AND NOT x.code = ANY($3::text[])"
        "   LIMIT 1) o ON true"
        " UNION ALL SELECT true, k.sid, NULL, NULL, NULL, NULL, NULL, NULL, k.kind,"
        " NULL, NULL, NULL, false, k.op"
        " FROM unnest($4::text[], $5::text[], $6::text[]) AS k(sid, op, kind)"
        " CROSS JOIN LATERAL (SELECT 1 FROM records x WHERE x.session_id = k.sid"
        "   AND x.operation_id = k.op AND x.kind = k.kind AND x.operation_id IS NOT NULL"
        "   OFFSET 0) r",
        [sid for sid, _ in named],
        [k for _, k in named],
        sorted(NOT_BINDING),
        [sid for sid, _, _ in ops],
        [op for _, op, _ in ops],
        [kind for _, _, kind in ops],
    ):
        sid = r["sid"]
        if r["op"]:
            states[sid].known_operations.add((r["operation_id"], r["kind"]))
            continue
        key = r["ek"]
        if r["record_id"] is not None:
            existing[(sid, key)] = _existing(r)
        if r["record_id"] is not None or r["refused"]:
            states[sid].known_keys.add(key)
    return existing


def _existing(r: asyncpg.Record) -> ExistingRecord:
    return ExistingRecord(
        r["record_id"],
        r["sid"],
        r["session_sequence"],
        r["run_id"],
        r["instance_id"],
        r["instance_sequence"],
        r["ek"],
        r["kind"],
        r["token_count"],
        r["token_method"],
        r["content_sha256"],
    )
