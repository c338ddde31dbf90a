"""What became of a refused event (``event_outcomes``): written by the processor for every
refusal it can attribute to the event's own session, read by the event-outcome route
(``GET /v1/sessions/{s}/events/{key}``) and by planning (a refused key stays refused).

Attribution: an outcome is written only for a session of the event's own space and actor
(a key claimed under another scope never poisons the real session's key). An
authentication refusal (``unauthenticated_event``: a signer that verified but may not write
the event, such as a user key) is written so that its runtime learns of it, but it does
not make the key refused: the genuine writer's later event with that key is still
applied, and a later refusal of it replaces the authentication one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from domain.context.envelope import UNAUTHENTICATED

# Refusals of an event whose scope did not check out: nothing is recorded for them.
UNSCOPED_REFUSALS = frozenset({"unknown_session", "scope_mismatch"})
# Recorded for the runtime to read, never a reason to refuse the key again.
NOT_BINDING = frozenset({UNAUTHENTICATED})


@dataclass(frozen=True)
class RefusedEvent:
    """One refusal to record: the event's claimed scope and key, and why."""

    session_id: str
    event_key: str
    code: str
    message: str
    space_id: str
    actor_id: str
    outcome: str = "dead_letter"  # or "rejected" (refused without a dead letter)
    # The records topic's message refused (partition, offset): its redelivery publishes
    # the dead letter again (``domain.planning.state.DeadLettered``). None: admission's refusals,
    # which refuse a redelivered message again by themselves.
    source: tuple[int, int] | None = None


def _upsert(not_binding: str) -> str:
    """ON CONFLICT: the first binding refusal stays; an authentication refusal gives way
    to any later refusal of the same key (``not_binding``: the parameter of their codes)."""
    return (
        " ON CONFLICT (session_id, event_key) DO UPDATE SET outcome = EXCLUDED.outcome,"
        " code = EXCLUDED.code, message = EXCLUDED.message, created_at = now(),"
        " source_partition = EXCLUDED.source_partition, source_offset = EXCLUDED.source_offset"
        f" WHERE event_outcomes.code = ANY({not_binding}::text[])"
        f" AND NOT EXCLUDED.code = ANY({not_binding}::text[])"
    )


async def record_refusals(
    conn: asyncpg.Connection, refusals: Sequence[RefusedEvent]
) -> set[tuple[str, str]]:
    """Write the ``refusals`` whose session is of the event's own space and actor (a
    forged scope records nothing); idempotent. Returns the (session_id, event_key) of
    those: the refusals that are their session's to know."""
    if not refusals:
        return set()
    rows = await conn.fetch(
        "SELECT session_id, space_id, actor_id FROM sessions WHERE session_id = ANY($1::text[])",
        sorted({r.session_id for r in refusals}),
    )
    scopes = {r["session_id"]: (r["space_id"], r["actor_id"]) for r in rows}
    own = [r for r in refusals if scopes.get(r.session_id) == (r.space_id, r.actor_id)]
    await _write(conn, own)
    return {(r.session_id, r.event_key) for r in own}


async def write_scoped(conn: asyncpg.Connection, refusals: Sequence[RefusedEvent]) -> None:
    """Write refusals whose scope planning already checked against the locked session."""
    await _write(conn, [r for r in refusals if r.code not in UNSCOPED_REFUSALS])


async def _write(conn: asyncpg.Connection, refusals: Sequence[RefusedEvent]) -> None:
    if refusals:
        await conn.executemany(
            "INSERT INTO event_outcomes (session_id, event_key, outcome, code, message,"
            " source_partition, source_offset) VALUES ($1,$2,$3,$4,$5,$7,$8)" + _upsert("$6"),
            [
                (
                    r.session_id,
                    r.event_key,
                    r.outcome,
                    r.code,
                    r.message,
                    sorted(NOT_BINDING),
                    *(r.source or (None, None)),
                )
                for r in refusals
            ],
        )
