"""Retractions in storage: what the processor needs to plan one, and the SQL
fragments views, read-back and the view epoch share.

A retraction is a record of kind ``record_retracted`` whose ``operation_id`` is its
target's ``record_id`` (validated at ingest), so "is this record retracted" is one probe
of the partial index ``records_retractions`` (migration 014).
"""

from __future__ import annotations

import asyncpg

from domain.planning.state import SessionState
from domain.policy.retraction_rules import RetractionTarget

RETRACTED = "record_retracted"


def retracted_sql(alias: str = "r") -> str:
    """True when the record ``alias`` was retracted."""
    return (
        f"EXISTS (SELECT 1 FROM records rx WHERE rx.session_id = {alias}.session_id"
        f" AND rx.kind = '{RETRACTED}' AND rx.operation_id = {alias}.record_id)"
    )


def live_sql(alias: str = "r") -> str:
    """A record a view shows: neither retracted nor a retraction (which renders nothing)."""
    return f"{alias}.kind <> '{RETRACTED}' AND NOT {retracted_sql(alias)}"


def count_sql(session_col: str) -> str:
    """How many retractions the session has: part of the view epoch, so that every cached
    view (Prepare's warm renderer, the compaction service's thread views) is rebuilt after
    one. Retractions are never undone, so the count only grows."""
    return (
        f"(SELECT count(*) FROM records rx WHERE rx.session_id = {session_col}"
        f" AND rx.kind = '{RETRACTED}')"
    )


# The calls a record makes (assistant message, tool_call) or answers (tool_outcome).
_CALL_IDS = (
    "CASE WHEN r.kind IN ('tool_call', 'tool_outcome') THEN ARRAY[r.payload->>'call_id']"
    " WHEN r.kind = 'assistant_message' AND jsonb_typeof(r.payload->'tool_calls') = 'array'"
    " THEN ARRAY(SELECT e->>'call_id' FROM jsonb_array_elements(r.payload->'tool_calls') e)"
    " ELSE '{}'::text[] END"
)


async def load_targets(
    conn: asyncpg.Connection,
    states: dict[str, SessionState],
    operations: dict[str, set[tuple[str, str]]],
) -> None:
    """Facts about the targets of the batch's retractions (their operations), read under
    the sessions' locks: each target's kind, whether a committed summary covers it, its
    thread and the calls it makes or answers; the retracting runs' snapshot boundaries
    and the live calls the rules ask about (``domain.policy.retraction_rules``)."""
    sids, rids = [], []
    for sid in states:
        for op, kind in operations.get(sid, ()):
            if kind == RETRACTED:
                sids.append(sid)
                rids.append(op)
    if not sids:
        return
    for r in await conn.fetch(
        "SELECT r.session_id, r.record_id, r.kind, r.run_id, r.instance_id, r.session_sequence,"
        " r.visibility IN ('session', 'actor') AND r.instance_id = u.main_instance_id AS inherit,"
        f" {_CALL_IDS} AS call_ids,"
        " EXISTS (SELECT 1 FROM summary_revisions s"
        "   WHERE s.session_id = r.session_id AND s.status = 'committed'"
        "   AND r.record_id = ANY(s.covered_record_ids)) AS summarized"
        " FROM records r JOIN unnest($1::text[], $2::text[]) AS k(sid, rid)"
        "   ON r.session_id = k.sid AND r.record_id = k.rid"
        " LEFT JOIN runs u ON u.session_id = r.session_id AND u.run_id = r.run_id",
        sids,
        rids,
    ):
        thread = (r["run_id"], r["instance_id"]) if r["run_id"] and r["instance_id"] else None
        states[r["session_id"]].retraction_targets[r["record_id"]] = RetractionTarget(
            r["kind"],
            r["summarized"],
            thread,
            bool(r["inherit"]),
            r["session_sequence"],
            tuple(c for c in r["call_ids"] or () if c),
        )
    touched = {s: states[s] for s in sids}
    await _load_boundaries(conn, touched)
    await _load_live_calls(conn, touched)


async def _load_boundaries(conn: asyncpg.Connection, touched: dict[str, SessionState]) -> None:
    """The snapshot boundary (R2.1) of each loaded run: what its main thread inherited."""
    pairs = [(sid, run) for sid, st in touched.items() for run in st.runs]
    if not pairs:
        return
    for r in await conn.fetch(
        "SELECT u.session_id, u.run_id, x.through_session_sequence FROM runs u"
        " JOIN unnest($1::text[], $2::text[]) AS k(sid, run_id)"
        "   ON u.session_id = k.sid AND u.run_id = k.run_id"
        " JOIN history_snapshots x USING (snapshot_id)",
        [s for s, _ in pairs],
        [run for _, run in pairs],
    ):
        touched[r["session_id"]].run_boundaries[r["run_id"]] = int(r["through_session_sequence"])


async def _load_live_calls(conn: asyncpg.Connection, touched: dict[str, SessionState]) -> None:
    """The live records making a call, in the batch's threads and the targets' threads:
    for every call still unanswered there (a result the batch records may be a target)
    and every call a target outcome answers. Only sessions with a retraction pay this."""
    threads: set[tuple[str, str, str]] = set()
    answered: set[str] = set()
    for sid, st in touched.items():
        threads |= {(sid, run, inst) for run, inst in st.threads}
        for t in st.retraction_targets.values():
            if t.thread is not None:
                threads.add((sid, *t.thread))
                if t.kind == "tool_outcome":
                    answered.update(t.call_ids)
    if not threads:
        return
    ordered = sorted(threads)
    columns = [[t[i] for t in ordered] for i in range(3)]
    for r in await conn.fetch(_LIVE_CALLS, *columns, sorted(answered)):
        touched[r["session_id"]].live_calls.setdefault(
            ((r["run_id"], r["instance_id"]), r["call_id"]), set()
        ).add(r["record_id"])


_LIVE_CALLS = (
    "WITH c AS (SELECT r.session_id, r.run_id, r.instance_id, r.record_id, x.call_id"
    " FROM unnest($1::text[], $2::text[], $3::text[]) AS t(sid, run_id, instance_id)"
    " JOIN records r ON r.session_id = t.sid AND r.run_id = t.run_id"
    "   AND r.instance_id = t.instance_id"
    f" CROSS JOIN LATERAL unnest({_CALL_IDS}) AS x(call_id)"
    f" WHERE r.kind IN ('tool_call', 'assistant_message') AND NOT {retracted_sql('r')})"
    " SELECT c.* FROM c WHERE c.call_id = ANY($4::text[]) OR NOT EXISTS (SELECT 1"
    "   FROM records o WHERE o.session_id = c.session_id AND o.run_id = c.run_id"
    "   AND o.instance_id = c.instance_id AND o.kind = 'tool_outcome'"
    f"   AND o.payload->>'call_id' = c.call_id AND NOT {retracted_sql('o')})"
)
