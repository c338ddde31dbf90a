"""A dead letter lost between its refusal's commit and its publish (the processor died
there) is published again when Kafka redelivers the refused message: planning finds the
key refused with that message's place (``event_outcomes.source_partition`` and
``source_offset``), takes the message for a duplicate and sends its letter, with the
refusal written once."""

from __future__ import annotations

import time
import uuid
from typing import Any

import asyncpg
import pytest

from schemas.contracts import (
    Authority,
    Content,
    ContextEvent,
    RecordKind,
    Scope,
    Source,
    UserInputPayload,
)
from schemas.wire import decode_dead_letter
from tests.support.flows import client, new_session, wait_committed
from tests.support.kafka import reader
from tests.support.services import TEST_SPACE, Services

pytestmark = pytest.mark.integration


def stray(session: dict[str, Any], key: str) -> ContextEvent:
    """A user's input to a run the session never started: dead-lettered ``unknown_run``."""
    return ContextEvent(
        event_id=str(uuid.uuid4()),
        event_key=key,
        scope=Scope(TEST_SPACE, session["actor_id"], session["session_id"], "run-nowhere", "main"),
        kind=RecordKind.USER_INPUT,
        authority=Authority.USER,
        source=Source("test", "here", int(time.time() * 1000)),
        content=Content.text("Where does this go?"),
        payload=UserInputPayload(),
    )


async def letters_of(services: Services, at: tuple[int, int]) -> list[tuple[str, str]]:
    """(reason code, reason) of every letter on the dead-letter topic of the records
    topic's message at ``at`` (the topic read to its end)."""
    consumer = reader(services.stack.kafka_bootstrap, services.env("ALC_TOPIC_DEAD_LETTER"))
    await consumer.start()
    out = []
    try:
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=100)
        ends = await consumer.end_offsets(list(consumer.assignment()))
        await consumer.seek_to_beginning()
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            for msgs in (await consumer.getmany(timeout_ms=300)).values():
                for m in msgs:
                    d = decode_dead_letter(m.value)
                    if (d.source_partition, d.source_offset) == at:
                        out.append((d.reason_code, d.reason))
    finally:
        await consumer.stop()
    return out


async def outcome(db: asyncpg.Pool, sid: str, key: str) -> tuple[Any, ...]:
    row = await db.fetchrow(
        "SELECT outcome, code, message, source_partition, source_offset, created_at"
        " FROM event_outcomes WHERE session_id=$1 AND event_key=$2",
        sid,
        key,
    )
    assert row is not None, f"no outcome of {key}"
    return tuple(row)


@pytest.mark.spec("R3.1", "R3.3", "R15.3")
async def test_a_refused_message_redelivered_publishes_its_lost_dead_letter(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        session = await new_session(c)
        sid = session["session_id"]
        # A refusal is committed with its message's place, and its letter published.
        (first,) = await c.producer.send_many([stray(session, "stray-1")])
        await wait_committed(db, services, dict([first]))
        assert (await outcome(db, sid, "stray-1"))[:2] == ("dead_letter", "unknown_run")
        assert (await outcome(db, sid, "stray-1"))[3:5] == first
        assert [code for code, _ in await letters_of(services, first)] == ["unknown_run"]
        # What a processor that died between the two leaves: the refusal of a message
        # committed, its letter never sent, the message not consumed in Kafka's books.
        services.processor.stop()
        try:
            (lost,) = await c.producer.send_many([stray(session, "stray-2")])
            await db.execute(
                "INSERT INTO event_outcomes (session_id, event_key, outcome, code, message,"
                " source_partition, source_offset) VALUES ($1, 'stray-2', 'dead_letter',"
                " 'unknown_run', 'run run-nowhere was never started', $2, $3)",
                sid,
                *lost,
            )
            committed = await outcome(db, sid, "stray-2")
        finally:
            services.processor.start()
        await wait_committed(db, services, dict([lost]))
    # Redelivered, the message is a duplicate whose letter goes out, its refusal as it was.
    assert await letters_of(services, lost) == [
        ("unknown_run", "run run-nowhere was never started")
    ]
    assert await outcome(db, sid, "stray-2") == committed
    assert not await db.fetchval(
        "SELECT 1 FROM records WHERE session_id=$1 AND event_key LIKE 'stray-%'", sid
    )
