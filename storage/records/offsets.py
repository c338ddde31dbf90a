"""What the session processor has committed: ``consumer_offsets`` is written in the same
transaction as the records, so a committed offset means its records are readable. The
notification sent at that commit carries the offsets it wrote (``commit_note``), so a
reader that heard it knows them without reading the table."""

from __future__ import annotations

import asyncpg

# The channel of the notification sent at a batch's commit (``commit_note``).
NOTIFY_CHANNEL = "ctx_committed"
# Fields of a commit note: consumer, topic, then "partition:next_offset" pairs. (A unit
# separator: neither a consumer group id nor a topic name may contain it.)
_FIELD = "\x1f"


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


def commit_note(consumer: str, topic: str, next_offsets: dict[int, int]) -> str:
    """The payload of the notification sent at a batch's commit: whose offsets, and the
    next offset of each partition the batch wrote."""
    pairs = ",".join(f"{p}:{o}" for p, o in sorted(next_offsets.items()))
    return _FIELD.join((consumer, topic, pairs))


def read_commit_note(payload: str, consumer: str, topic: str) -> dict[int, int] | None:
    """The offsets a ``commit_note`` says ``consumer`` committed on ``topic``; None for
    another consumer's or topic's note, or a payload that is not a note (an older
    processor's notification names only the topic)."""
    parts = payload.split(_FIELD)
    if len(parts) != 3 or parts[0] != consumer or parts[1] != topic:
        return None
    try:
        return {
            int(p): int(o) for p, o in (pair.split(":") for pair in parts[2].split(",") if pair)
        }
    except ValueError:
        return None
