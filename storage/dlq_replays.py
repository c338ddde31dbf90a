"""The audit trail of ``agentloom dlq replay`` (migration 021): who replayed which letter,
as which principal, and what became of it. The CLI writes a letter's row before it sends
anything, so no replay goes unrecorded. Also what the replay reads to tell what the
processor will do with an original (``known``) and what it did (``passed``)."""

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


async def verified(
    conn: asyncpg.Connection, replay_id: str, letter_ref: str, code: str | None, detail: str
) -> None:
    """A replayed letter's row once the processor's answer was read back (``code``: the
    refusal's, if it refused the original again)."""
    await conn.execute(
        "UPDATE dlq_replays SET code=$3, detail=$4"
        " WHERE replay_id=$1 AND letter_ref=$2 AND outcome='replayed'",
        replay_id,
        letter_ref,
        code,
        detail,
    )


@dataclass(frozen=True)
class Known:
    """What the database holds of a replayed event's session and key: what decides
    whether the processor applies the original or ignores it."""

    session: tuple[str, str] | None  # (space_id, actor_id); None: no such session
    record: tuple[str, int] | None  # (record_id, session_sequence) committed for the key
    operation_record: str | None  # the record committed for the event's operation
    refusal: tuple[str, str] | None  # (code, message) recorded for the key


async def known(
    conn: asyncpg.Connection,
    session_id: str,
    event_key: str,
    operation: tuple[str, str] | None,
) -> Known:
    """``operation``: the event's (operation_id, kind), when it has one."""
    session = await conn.fetchrow(
        "SELECT space_id, actor_id FROM sessions WHERE session_id=$1", session_id
    )
    record = await conn.fetchrow(
        "SELECT record_id, session_sequence FROM records WHERE session_id=$1 AND event_key=$2",
        session_id,
        event_key,
    )
    refusal = await conn.fetchrow(
        "SELECT code, message FROM event_outcomes WHERE session_id=$1 AND event_key=$2",
        session_id,
        event_key,
    )
    op = None
    if operation is not None:
        op = await conn.fetchval(
            "SELECT record_id FROM records WHERE session_id=$1 AND operation_id=$2 AND kind=$3",
            session_id,
            *operation,
        )
    return Known(
        None if session is None else (session["space_id"], session["actor_id"]),
        None if record is None else (record["record_id"], record["session_sequence"]),
        op,
        None if refusal is None else (refusal["code"], refusal["message"]),
    )


async def passed(
    conn: asyncpg.Connection, consumer: str, topic: str, partition: int, offset: int
) -> bool:
    """Whether the processor ``consumer`` has consumed ``topic``'s ``partition`` past
    ``offset`` (its tracking rows: written with the effects, in one transaction)."""
    nxt = await conn.fetchval(
        "SELECT next_offset FROM consumer_offsets WHERE consumer=$1 AND topic=$2 AND partition=$3",
        consumer,
        topic,
        partition,
    )
    return nxt is not None and nxt > offset
