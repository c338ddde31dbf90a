"""The audit trail of ``agentloom dlq replay`` (migration 021): who replayed which letter,
as which principal, and what became of it. The CLI writes a letter's row before it sends
anything, so no replay goes unrecorded."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg


@dataclass(frozen=True)
class Operator:
    """Who runs the replay: the host's user, and the broker principal it sends as."""

    os_user: str
    principal: str
    host: str


@dataclass(frozen=True)
class LetterRow:
    letter_ref: str
    dead_letter_topic: str
    source_topic: str
    source_partition: int
    source_offset: int
    session_id: str | None
    event_key: str | None
    reason_code: str
    value_sha256: str


async def record(
    conn: asyncpg.Connection,
    replay_id: str,
    who: Operator,
    row: LetterRow,
    outcome: str,
    code: str | None = None,
    detail: str | None = None,
) -> None:
    await conn.execute(
        "INSERT INTO dlq_replays (replay_id, letter_ref, dead_letter_topic, source_topic,"
        " source_partition, source_offset, session_id, event_key, reason_code, value_sha256,"
        " outcome, code, detail, os_user, principal, host)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
        replay_id,
        row.letter_ref,
        row.dead_letter_topic,
        row.source_topic,
        row.source_partition,
        row.source_offset,
        row.session_id,
        row.event_key,
        row.reason_code,
        row.value_sha256,
        outcome,
        code,
        detail,
        who.os_user,
        who.principal,
        who.host,
    )


async def settle(
    conn: asyncpg.Connection,
    replay_id: str,
    letter_ref: str,
    outcome: str,
    code: str | None = None,
    detail: str | None = None,
) -> None:
    """A sent letter's row: ``replaying`` becomes ``replayed`` or ``failed``."""
    await conn.execute(
        "UPDATE dlq_replays SET outcome=$3, code=$4, detail=$5"
        " WHERE replay_id=$1 AND letter_ref=$2 AND outcome='replaying'",
        replay_id,
        letter_ref,
        outcome,
        code,
        detail,
    )


async def of_replay(conn: asyncpg.Connection, replay_id: str) -> list[asyncpg.Record]:
    return list(
        await conn.fetch(
            "SELECT * FROM dlq_replays WHERE replay_id=$1 ORDER BY letter_ref", replay_id
        )
    )
