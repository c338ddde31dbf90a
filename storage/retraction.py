"""Retractions in storage (issue 15): what the processor needs to plan one, and the SQL
fragments views, read-back and the view epoch share.

A retraction is a record of kind ``record_retracted`` whose ``operation_id`` is its
target's ``record_id`` (validated at ingest), so "is this record retracted" is one probe
of the partial index ``records_retractions`` (migration 014).
"""

from __future__ import annotations

import asyncpg

from domain.planning import RetractionTarget, SessionState

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


async def load_targets(
    conn: asyncpg.Connection,
    states: dict[str, SessionState],
    operations: dict[str, set[tuple[str, str]]],
) -> None:
    """Facts about the targets of the batch's retractions (their operations), read under
    the sessions' locks: each target's kind and whether a committed summary covers it."""
    sids, rids = [], []
    for sid in states:
        for op, kind in operations.get(sid, ()):
            if kind == RETRACTED:
                sids.append(sid)
                rids.append(op)
    if not sids:
        return
    for r in await conn.fetch(
        "SELECT r.session_id, r.record_id, r.kind, EXISTS (SELECT 1 FROM summary_revisions s"
        "   WHERE s.session_id = r.session_id AND s.status = 'committed'"
        "   AND r.record_id = ANY(s.covered_record_ids)) AS summarized"
        " FROM records r JOIN unnest($1::text[], $2::text[]) AS k(sid, rid)"
        "   ON r.session_id = k.sid AND r.record_id = k.rid",
        sids,
        rids,
    ):
        states[r["session_id"]].retraction_targets[r["record_id"]] = RetractionTarget(
            r["kind"], r["summarized"]
        )
