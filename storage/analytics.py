"""PostgreSQL side of the analytics rollups: apply consumed events effectively once, and
read the rollups back for the API."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from domain.pricing import format_cost
from domain.rollup import COST_METRIC, Dims, Fact, RollupKey, distributions, rollup
from schemas.answers.ops import RollupRow
from storage.plans import custom_plan

__all__ = ["Consumed", "apply", "distributions", "query", "session_dims"]


@dataclass(frozen=True)
class Consumed:
    """One consumed message: where it was read and what it adds (``fact`` None: nothing,
    e.g. an undecodable message — its offset still moves)."""

    topic: str
    partition: int
    offset: int
    fact: Fact | None


# The staging table's columns: the rollups' primary key in its order, then the value.
_COLUMNS = (
    "window_name",
    "space_id",
    "bucket_start",
    "agent_id",
    "release_id",
    "model",
    "purpose",
    "metric",
    "label",
    "value",
)
_KEY = ", ".join(_COLUMNS[:-1])


@functools.lru_cache(maxsize=4096)
def _window_start(bucket_ms: int) -> datetime:
    # A batch holds a few windows and many rows per window: one datetime per window.
    return datetime.fromtimestamp(bucket_ms / 1000, UTC)


def _records(sums: Mapping[RollupKey, int]) -> list[tuple[Any, ...]]:
    return [
        (
            k.window,
            k.dims.space_id,
            _window_start(k.bucket_ms),
            k.dims.agent_id,
            k.dims.release_id,
            k.dims.model,
            k.dims.purpose,
            k.metric,
            k.label,
            value,
        )
        for k, value in sums.items()
    ]


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


async def apply(
    pool: asyncpg.Pool,
    consumer: str,
    batch: Sequence[Consumed],
    sums: Mapping[RollupKey, int] | None = None,
) -> int:
    """Add the batch's increments and move the tracking offsets in one transaction; the
    messages below a partition's tracked offset were applied before (a redelivery after a
    crash, a rebalance, or a replay from the beginning) and are skipped. ``sums``: the
    batch's increments already summed by the caller (``rollup`` of every fact), used when
    every message is new; otherwise the new ones are summed again here. Returns how many
    messages were new."""
    async with pool.acquire() as conn, conn.transaction():
        done = await _lock_offsets(conn, consumer, batch)
        fresh = [c for c in batch if c.offset >= done.get((c.topic, c.partition), 0)]
        if sums is None or len(fresh) < len(batch):
            sums = rollup(c.fact for c in fresh if c.fact is not None)
        await _add(conn, sums)
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


async def _lock_offsets(
    conn: asyncpg.Connection, consumer: str, batch: Sequence[Consumed]
) -> dict[tuple[str, int], int]:
    """The tracked next offset of each partition of the batch, locked. FOR UPDATE: two
    members of the group briefly owning one partition (rebalance) serialise here instead
    of both applying it."""
    parts = sorted({(c.topic, c.partition) for c in batch})
    rows = await conn.fetch(
        "SELECT topic, partition, next_offset FROM analytics_offsets"
        " WHERE consumer=$1 AND (topic, partition) IN"
        " (SELECT * FROM unnest($2::text[], $3::int[])) FOR UPDATE",
        consumer,
        [t for t, _ in parts],
        [p for _, p in parts],
    )
    return {(r["topic"], r["partition"]): r["next_offset"] for r in rows}


async def _add(conn: asyncpg.Connection, sums: Mapping[RollupKey, int]) -> None:
    """One set-based upsert of the batch's sums. COPY into a session-local staging table
    (binary, no per-element array checks: encoding ten parallel arrays for unnest took
    a third of the consumer's time), then one INSERT ... SELECT ... ON CONFLICT."""
    records = _records(sums)
    if not records:
        return
    # LIKE: the rollups' columns and their "C" collation (migration 016), so the sort
    # below compares bytes. ON COMMIT DELETE ROWS: the staging rows never outlive the
    # transaction; the table stays with the pooled connection (pool.py: no RESET ALL).
    await conn.execute(
        "CREATE TEMP TABLE IF NOT EXISTS analytics_staging"
        " (LIKE analytics_rollups) ON COMMIT DELETE ROWS"
    )
    await conn.copy_records_to_table("analytics_staging", records=records, columns=_COLUMNS)
    # ORDER BY the key: concurrent upserts of overlapping rows (two members of the group
    # during a rebalance) take their row locks in one order and cannot deadlock.
    await conn.execute(
        f"INSERT INTO analytics_rollups AS a ({_KEY}, value)"
        f" SELECT {_KEY}, value FROM analytics_staging ORDER BY {_KEY}"
        f" ON CONFLICT ({_KEY}) DO UPDATE SET value = a.value + EXCLUDED.value"
    )


# Window function over the rows of one group (window start and dimensions): a group's
# input total beside its cached-input row, computed before LIMIT so that a truncated
# answer still gives the right share for every row it holds.
_GROUP = "PARTITION BY bucket_start, agent_id, release_id, model, purpose"
CACHED_METRIC = "usage_cached_input_tokens"
INPUT_METRIC = "usage_input_tokens"


async def query(
    pool: asyncpg.Pool,
    window: str,
    space_id: str,
    start: datetime | None,
    end: datetime | None,
    agent_id: str | None,
    purpose: str | None,
    limit: int,
) -> list[RollupRow]:
    """Rollup rows of one space, oldest window first, ``[start, end)`` on the window start.
    Derived values ride on the row they are read from: a ``usage_cached_input_tokens``
    row carries ``cache_share`` (its group's cached / all input tokens, None without
    input), a ``cost_picos`` row carries ``cost``, the exact amount as a decimal string
    of the currency in its label."""
    # Which filters are set decides the plan (a window's range bounds the index scan
    # only when given): planned for these arguments, not once for all.
    async with pool.acquire() as conn, custom_plan(conn):
        rows = await conn.fetch(_QUERY, window, space_id, start, end, agent_id, purpose, limit,
                                CACHED_METRIC, INPUT_METRIC)  # fmt: skip
    return [_row(space_id, r) for r in rows]


_QUERY = (
    "SELECT bucket_start, agent_id, release_id, model, purpose, metric, label, value,"
    " CASE WHEN metric = $8 THEN sum(value) FILTER"
    f" (WHERE metric = $9 AND label = '') OVER ({_GROUP}) END AS group_input"
    " FROM analytics_rollups WHERE window_name=$1 AND space_id=$2"
    " AND ($3::timestamptz IS NULL OR bucket_start >= $3)"
    " AND ($4::timestamptz IS NULL OR bucket_start < $4)"
    " AND ($5::text IS NULL OR agent_id = $5) AND ($6::text IS NULL OR purpose = $6)"
    " ORDER BY bucket_start, agent_id, release_id, model, purpose, metric, label"
    " LIMIT $7"
)


def _row(space_id: str, r: Mapping[str, Any]) -> RollupRow:
    row: dict[str, Any] = {
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
    if r["metric"] == CACHED_METRIC:
        total = int(r["group_input"] or 0)  # sum(bigint) is numeric: a Decimal
        row["cache_share"] = round(int(r["value"]) / total, 6) if total else None
    elif r["metric"] == COST_METRIC:
        row["cost"] = format_cost(r["value"])
    return RollupRow.model_validate(row)  # only the keys given: what the API answers
