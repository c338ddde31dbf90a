"""storage.analytics.apply against the real database (SPEC R18, issue 12): a batch summed
by the caller is written once, a redelivery adds nothing, and a batch that overlaps what
was applied is summed again from its new messages only."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC

import asyncpg
import pytest

from domain.rollup import Dims, Fact, Increment, RollupKey, rollup
from storage import analytics as store
from storage.migrate import apply_dsn
from storage.pool import create_pool

pytestmark = [pytest.mark.integration, pytest.mark.spec("R18")]

T0 = 1_700_000_000_000  # a fixed event time: the windows below are known


@pytest.fixture
async def pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    await apply_dsn(pg_dsn)
    p = await create_pool(pg_dsn, 1, 2)
    yield p
    await p.close()


@pytest.fixture
async def names(pool: asyncpg.Pool) -> AsyncIterator[tuple[str, str]]:
    """A purpose and a consumer of this test only; their rows are removed afterwards (the
    database is shared with the tests that recount every rollup row)."""
    purpose, consumer = f"p-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    yield purpose, consumer
    await pool.execute("DELETE FROM analytics_rollups WHERE purpose=$1", purpose)
    await pool.execute("DELETE FROM analytics_offsets WHERE consumer=$1", consumer)


def _batch(purpose: str, offsets: range) -> list[store.Consumed]:
    """One fact per offset: a prepare and a histogram count, a minute apart."""
    return [
        store.Consumed(
            "obs",
            0,
            o,
            Fact(
                T0 + o * 60_000,
                Dims("sp", "ag", "rel", "m", purpose),
                (Increment("prepares", "", 1), Increment("tokens_hist", f"|{o % 3}", 1)),
            ),
        )
        for o in offsets
    ]


def _sums(batch: list[store.Consumed]) -> dict[RollupKey, int]:
    return rollup(c.fact for c in batch if c.fact is not None)


async def _stored(pool: asyncpg.Pool, purpose: str) -> dict[RollupKey, int]:
    rows = await pool.fetch("SELECT * FROM analytics_rollups WHERE purpose=$1", purpose)
    return {
        RollupKey(
            r["window_name"],
            int(r["bucket_start"].astimezone(UTC).timestamp() * 1000),
            Dims(r["space_id"], r["agent_id"], r["release_id"], r["model"], r["purpose"]),
            r["metric"],
            r["label"],
        ): r["value"]
        for r in rows
    }


async def test_a_summed_batch_is_written_once_and_an_overlap_only_adds_its_new_messages(
    pool: asyncpg.Pool, names: tuple[str, str]
) -> None:
    purpose, consumer = names
    first = _batch(purpose, range(0, 10))
    assert await store.apply(pool, consumer, first, _sums(first)) == 10
    assert await _stored(pool, purpose) == _sums(first)

    # A redelivery of the same batch (a crash before the Kafka commit): nothing new.
    assert await store.apply(pool, consumer, first, _sums(first)) == 0
    assert await _stored(pool, purpose) == _sums(first)

    # A batch that overlaps (offsets 5-14, e.g. after a rebalance): the caller's sums
    # cover messages already applied, so only offsets 10-14 are summed and added.
    overlap = _batch(purpose, range(5, 15))
    assert await store.apply(pool, consumer, overlap, _sums(overlap)) == 5
    assert await _stored(pool, purpose) == _sums(_batch(purpose, range(0, 15)))


async def test_without_caller_sums_the_batch_is_summed_here(
    pool: asyncpg.Pool, names: tuple[str, str]
) -> None:
    purpose, consumer = names
    batch = [*_batch(purpose, range(0, 4)), store.Consumed("obs", 0, 4, None)]
    assert await store.apply(pool, consumer, batch) == 5
    assert await _stored(pool, purpose) == _sums(batch)
    row = await pool.fetchval(
        "SELECT next_offset FROM analytics_offsets WHERE consumer=$1 AND topic='obs'", consumer
    )
    assert row == 5  # the undecodable message's offset moved too
