"""Stored views of model calls (R18, R4.2, migration 024): what a call
saw, written in the transaction that records the call (storage/calls/model_calls.py), from the
prepared context it was checked for and the provider request that was sent.

Both inputs are immutable, so a view not written then (the prepared context was still
being written behind its answer, services/prepare/assembly/prepared.py) is written at the first
read while the prepared context is kept; a call whose prepared context is gone has no
stored view and is shown rebuilt (``rebuilt: true``). Views go with their call (cascade)
and are pruned after the prepared-context retention (``prune``).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any, TypedDict, cast

import asyncpg
import orjson

from domain.context.call_view import CallView, call_view, stored_view
from domain.context.sent_view import Source, pack, sent_view, unpack
from schemas.answers.diagnostics import SummaryLink
from storage.calls.batches import delete_in_batches
from storage.calls.prepared_body import body_of
from storage.inspection import call_facts, summary_chain


async def view_of(pool: asyncpg.Pool, session_id: str, call_id: str) -> CallView | None:
    """What the call saw: its stored blocks and summary chain, with what changed since
    noted beside them; rebuilt from today's records (``rebuilt: true``) only for a call
    that has no stored view. None if the session has no such call."""
    facts = await call_facts(pool, session_id, call_id)
    if facts is None:
        return None
    view = call_view(facts)
    stored = await load(pool, session_id, call_id)
    if stored is None:
        return view
    ids = sorted({str(i) for b in stored.get("blocks") or () for i in b.get("record_ids") or ()})
    retracted, revoked = await changed_since(pool, session_id, ids)
    chain = tuple(
        SummaryLink(
            **(
                c
                | {
                    "covered_ranges": tuple((int(a), int(b)) for a, b in c["covered_ranges"]),
                    "covered_record_ids": tuple(c["covered_record_ids"]),
                    "trigger_reasons": tuple(c["trigger_reasons"]),
                }
            )
        )
        for c in stored.get("chain") or ()
    )
    return replace(stored_view(view, stored, retracted, revoked), chain=chain)


async def record(
    conn: asyncpg.Connection, call_id: str, prepared_id: str, session_id: str, request_sha: str
) -> bool:
    """Build and store the call's view; False when its prepared context is not stored
    (yet). Idempotent: a second write of one call changes nothing."""
    body = await body_of(conn, prepared_id)
    if body is None:
        return False
    # The prepared context's stored form is services/prepare/assembly/prepared.py's: only its
    # annotated messages, provider format and dependency versions are read here.
    prepared = orjson.loads(bytes(body))
    text = await conn.fetchval(
        "SELECT convert_from(b.content, 'UTF8') FROM blobs b JOIN sessions s"
        " ON b.space_id = s.space_id WHERE s.session_id=$1 AND b.sha256=$2",
        session_id,
        request_sha,
    )
    deps = prepared.get("dependency_versions") or {}
    messages = prepared.get("messages") or []
    summary = await conn.fetchrow(
        "SELECT summary_id, source_watermark, covered_record_ids FROM summary_revisions"
        " WHERE summary_id=$1",
        deps.get("summary_id"),
    )
    covered = list(summary["covered_record_ids"] or ()) if summary else []
    named = {str(i) for m in messages for i in m.get("record_ids") or ()} | set(covered)
    rows = await conn.fetch(
        "SELECT record_id, kind, session_sequence, token_count FROM records"
        " WHERE session_id=$1 AND record_id = ANY($2)",
        session_id,
        sorted(named),
    )
    view = sent_view(
        messages,
        None if text is None else orjson.loads(text),
        str((prepared.get("profile") or {}).get("provider_format") or "openai_chat"),
        request_sha,
        (None, None) if summary is None else (summary["summary_id"], summary["source_watermark"]),
        {
            r["record_id"]: Source(
                r["record_id"], r["kind"], r["session_sequence"], r["token_count"]
            )
            for r in rows
        },
        covered,
    )
    # The chain as it stood: a summary invalidated later (R15.3) shows as it was then.
    view["chain"] = [
        asdict(c) for c in await summary_chain(conn, session_id, deps.get("summary_id"))
    ]
    await conn.execute(
        "INSERT INTO call_views (call_id, session_id, body) VALUES ($1, $2, $3)"
        " ON CONFLICT (call_id) DO NOTHING",
        call_id,
        session_id,
        pack(view),
    )
    return True


class StoredView(TypedDict, total=False):
    """A call's stored view (``domain.context.sent_view`` packs it): the blocks as they
    were sent, the summary chain as it stood, the request's hash and the summary shown.
    A block and a chain link stay the JSON they were packed as."""

    blocks: list[dict[str, Any]]
    chain: list[dict[str, Any]]
    request_sha256: str | None
    summary_id: str | None
    summary_version: int | None


async def load(pool: asyncpg.Pool, session_id: str, call_id: str) -> StoredView | None:
    """The stored view of the call, written now if it was not at the call (see above);
    None when there is none to be had."""
    async with pool.acquire() as conn:
        body = await conn.fetchval(
            "SELECT body FROM call_views WHERE call_id=$1 AND session_id=$2", call_id, session_id
        )
        if body is None:
            row = await conn.fetchrow(
                "SELECT prepared_id, final_input_sha256 FROM model_calls"
                " WHERE call_id=$1 AND session_id=$2",
                call_id,
                session_id,
            )
            if row is None or not await record(
                conn, call_id, row["prepared_id"], session_id, row["final_input_sha256"]
            ):
                return None
            body = await conn.fetchval("SELECT body FROM call_views WHERE call_id=$1", call_id)
    return cast(StoredView, unpack(bytes(body)))


async def changed_since(
    pool: asyncpg.Pool, session_id: str, record_ids: list[str]
) -> tuple[set[str], set[str]]:
    """Of ``record_ids``, those retracted and those whose resource was revoked — today:
    noted beside a past call's blocks, never written into its view."""
    rows = await pool.fetch(
        "SELECT r.record_id, EXISTS (SELECT 1 FROM records x WHERE x.session_id = r.session_id"
        "  AND x.kind = 'record_retracted' AND x.operation_id = r.record_id) AS retracted,"
        " (r.resource_ref IS NOT NULL AND EXISTS (SELECT 1 FROM revoked_resources v"
        "  WHERE v.session_id = r.session_id AND v.resource_id = r.resource_ref)) AS revoked"
        " FROM records r WHERE r.session_id=$1 AND r.record_id = ANY($2)",
        session_id,
        record_ids,
    )
    return (
        {r["record_id"] for r in rows if r["retracted"]},
        {r["record_id"] for r in rows if r["revoked"]},
    )


class PgCallViews:
    """The retention of stored call views (services/prepare/assembly/retention.py)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def prune(self, older_than_s: float, batch: int = 5000) -> int:
        return await delete_in_batches(
            self.pool,
            "WITH old AS (SELECT call_id FROM call_views"
            " WHERE created_at < now() - make_interval(secs => $1) LIMIT $2)"
            " , gone AS (DELETE FROM call_views v USING old"
            " WHERE v.call_id = old.call_id RETURNING 1)"
            " SELECT count(*) FROM gone",
            older_than_s,
            batch,
        )
