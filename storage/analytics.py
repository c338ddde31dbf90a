"""PostgreSQL side of the analytics rollups: apply consumed events effectively once, and
read the rollups back for the API."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from schemas.rollup import Dims, Fact, RollupKey, distributions, rollup

__all__ = ["Consumed", "apply", "distributions", "query", "session_dims"]


@dataclass(frozen=True)
class Consumed:
    """One consumed message: where it was read and what it adds (``fact`` None: nothing,
    e.g. an undecodable message — its offset still moves)."""

    topic: str
    partition: int
    offset: int
    fact: Fact | None


def _order(k: RollupKey) -> tuple[str, int, str, str, str, str, str, str, str]:
    d = k.dims
    return (
        k.window,
        k.bucket_ms,
        d.space_id,
        d.agent_id,
        d.release_id,
        d.model,
        d.purpose,
        k.metric,
        k.label,
    )


async def session_dims(pool: asyncpg.Pool, session_ids: Sequence[str]) -> dict[str, Dims]:
    """Space, agent, release and model of each known session (fixed at open, R1.4)."""
    if not session_ids:
        return {}
    rows = await pool.fetch(
        "SELECT s.session_id, s.space_id, r.agent_id, r.release_id,"
        " coalesce(r.model_profile->>'name', '') AS model"
        " FROM sessions s JOIN releases r USING (release_id)"
        " WHERE s.session_id = ANY($1::text[])",
        list(session_ids),
    )
    return {
        r["session_id"]: Dims(r["space_id"], r["agent_id"], r["release_id"], r["model"])
        for r in rows
    }


async def apply(pool: asyncpg.Pool, consumer: str, batch: Sequence[Consumed]) -> int:
    """Add the batch's increments and move the tracking offsets in one transaction; the
    messages below a partition's tracked offset were applied before (a redelivery after a
    crash, or a replay from the beginning) and are skipped. Returns how many were new."""
    async with pool.acquire() as conn, conn.transaction():
        parts = sorted({(c.topic, c.partition) for c in batch})
        # FOR UPDATE: two members of the group briefly owning one partition (rebalance)
        # serialise here instead of both applying it.
        rows = await conn.fetch(
            "SELECT topic, partition, next_offset FROM analytics_offsets"
            " WHERE consumer=$1 AND (topic, partition) IN"
            " (SELECT * FROM unnest($2::text[], $3::int[])) FOR UPDATE",
            consumer,
            [t for t, _ in parts],
            [p for _, p in parts],
        )
        done = {(r["topic"], r["partition"]): r["next_offset"] for r in rows}
        fresh = [c for c in batch if c.offset >= done.get((c.topic, c.partition), 0)]
        sums = rollup(c.fact for c in fresh if c.fact is not None)
        if sums:
            # A fixed row order: concurrent upserts of overlapping rows cannot deadlock.
            keys = sorted(sums, key=_order)
            await conn.execute(
                "INSERT INTO analytics_rollups AS a (window_name, bucket_start, space_id,"
                " agent_id, release_id, model, purpose, metric, label, value)"
                " SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[],"
                " $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[])"
                " ON CONFLICT (window_name, space_id, bucket_start, agent_id, release_id,"
                " model, purpose, metric, label) DO UPDATE SET value = a.value + EXCLUDED.value",
                [k.window for k in keys],
                [datetime.fromtimestamp(k.bucket_ms / 1000, UTC) for k in keys],
                [k.dims.space_id for k in keys],
                [k.dims.agent_id for k in keys],
                [k.dims.release_id for k in keys],
                [k.dims.model for k in keys],
                [k.dims.purpose for k in keys],
                [k.metric for k in keys],
                [k.label for k in keys],
                [sums[k] for k in keys],
            )
        nxt: dict[tuple[str, int], int] = {}
        for c in fresh:
            nxt[(c.topic, c.partition)] = max(nxt.get((c.topic, c.partition), 0), c.offset + 1)
        if nxt:
            await conn.execute(
                "INSERT INTO analytics_offsets (consumer, topic, partition, next_offset)"
                " SELECT $1, * FROM unnest($2::text[], $3::int[], $4::bigint[])"
                " ON CONFLICT (consumer, topic, partition) DO UPDATE"
                " SET next_offset = GREATEST(analytics_offsets.next_offset,"
                " EXCLUDED.next_offset)",
                consumer,
                [t for t, _ in nxt],
                [p for _, p in nxt],
                list(nxt.values()),
            )
    return len(fresh)


async def query(
    pool: asyncpg.Pool,
    window: str,
    space_id: str,
    start: datetime | None,
    end: datetime | None,
    agent_id: str | None,
    purpose: str | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Rollup rows of one space, oldest window first, ``[start, end)`` on the window start."""
    rows = await pool.fetch(
        "SELECT bucket_start, agent_id, release_id, model, purpose, metric, label, value"
        " FROM analytics_rollups WHERE window_name=$1 AND space_id=$2"
        " AND ($3::timestamptz IS NULL OR bucket_start >= $3)"
        " AND ($4::timestamptz IS NULL OR bucket_start < $4)"
        " AND ($5::text IS NULL OR agent_id = $5) AND ($6::text IS NULL OR purpose = $6)"
        " ORDER BY bucket_start, agent_id, release_id, model, purpose, metric, label"
        " LIMIT $7",
        window,
        space_id,
        start,
        end,
        agent_id,
        purpose,
        limit,
    )
    return [
        {
            "bucket_start": r["bucket_start"].isoformat(),
            "space_id": space_id,
            "agent_id": r["agent_id"],
            "release_id": r["release_id"],
            "model": r["model"],
            "purpose": r["purpose"],
            "metric": r["metric"],
            "label": r["label"],
            "value": r["value"],
        }
        for r in rows
    ]
