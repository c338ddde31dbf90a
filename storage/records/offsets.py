"""What the session processor has committed: ``consumer_offsets`` is written in the same
transaction as the records, so a committed offset means its records are readable."""

from __future__ import annotations

import asyncpg


async def committed_offsets(
    pool: asyncpg.Pool, consumer: str, topic: str, partitions: list[int] | None = None
) -> dict[int, int]:
    """The next offset the processor will read, per partition (absent: nothing yet);
    every partition of ``topic`` unless ``partitions`` names some."""
    if partitions is None:
        rows = await pool.fetch(
            "SELECT partition, next_offset FROM consumer_offsets WHERE consumer=$1 AND topic=$2",
            consumer,
            topic,
        )
    else:
        rows = await pool.fetch(
            "SELECT partition, next_offset FROM consumer_offsets WHERE consumer=$1 AND topic=$2"
            " AND partition = ANY($3::int[])",
            consumer,
            topic,
            partitions,
        )
    return {r["partition"]: r["next_offset"] for r in rows}
