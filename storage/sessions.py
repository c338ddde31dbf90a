"""Sessions, runs, event outcomes and read grants, as Prepare reads them (R1, R3.3).

Prepare never writes runs or counters (the session processor is their single writer); it
opens sessions, records and revokes grants and reads what the processor decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import asyncpg

from domain.planning.state import RunState
from schemas.answers.sessions import EventOutcome, Session
from storage.records.threads import Snapshot


@dataclass(frozen=True)
class Refusal:
    """The processor's refusal of an event (``event_outcomes``)."""

    code: str
    message: str


class Sessions(Protocol):
    """Port: sessions, their runs, what became of their events, and their grants."""

    async def insert(
        self,
        session_id: str,
        space_id: str,
        actor_id: str,
        release_id: str,
        name: str | None = None,
    ) -> bool:
        """Open a session named ``name`` (default: its id) in its space; False when the id
        exists, or the name in the space (nothing written)."""

    async def resolve(self, space_id: str, session_id: str) -> Session | None:
        """The space's session a caller names ``session_id``: its session of that global
        id, else its session of that name; None when the space has neither (another
        space's session is not found, by the same query)."""

    async def get(self, session_id: str) -> Session | None: ...

    async def run(self, session_id: str, run_id: str) -> RunState | None:
        """A run's status and lifecycle counters."""

    async def refusal(self, session_id: str, event_key: str) -> Refusal | None:
        """The refusal recorded for an event, if it was refused."""

    async def settled(
        self, session_id: str, run_id: str, event_key: str
    ) -> tuple[Refusal | None, RunState | None]:
        """``refusal`` of the event and ``run`` of the run, in one read (a lifecycle
        event's answer, once the processor committed it)."""

    async def started(
        self, session_id: str, run_id: str, event_key: str
    ) -> tuple[Refusal | None, Snapshot | None]:
        """``refusal`` of a run's start and the run's snapshot, in one read."""

    async def outcome(self, session_id: str, event_key: str) -> EventOutcome | None:
        """The committed record of an event, or its recorded outcome; None if neither."""

    async def has_grant(self, session_id: str, actor_id: str) -> bool: ...

    async def add_grant(
        self, session_id: str, actor_id: str, granted_by: str, granted_by_key: str | None
    ) -> None:
        """Idempotent."""

    async def revoke_grant(
        self, session_id: str, actor_id: str, revoked_by: str, revoked_by_key: str | None
    ) -> bool:
        """Remove the grant and record who revoked it (migration 020); False when there
        was none (nothing written)."""


_SESSION = (
    "session_id, space_id, actor_id, release_id, active_run_id, revision, user_turns,"
    " model_steps, next_session_sequence - 1 AS last_sequence, session_name"
)


# The refusal recorded for event $3 of session $1 (``refusal``), joined beside a run's row.
_OUTCOME = (
    " LEFT JOIN LATERAL (SELECT code, message FROM event_outcomes"
    "  WHERE session_id=$1 AND event_key=$3 LIMIT 1) o ON true"
)


class PgSessions:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def insert(
        self,
        session_id: str,
        space_id: str,
        actor_id: str,
        release_id: str,
        name: str | None = None,
    ) -> bool:
        # No conflict target: a taken id and a name taken in the space both write nothing.
        row = await self.pool.fetchrow(
            "INSERT INTO sessions (session_id, space_id, actor_id, release_id, session_name)"
            " VALUES ($1,$2,$3,$4,$5) ON CONFLICT DO NOTHING RETURNING session_id",
            session_id,
            space_id,
            actor_id,
            release_id,
            name or session_id,
        )
        return row is not None

    async def resolve(self, space_id: str, session_id: str) -> Session | None:
        r = await self.pool.fetchrow(
            # Two index lookups (the global ids; the space's names), the global id first:
            # the id the API returned (and the SDK sends) always means its own session.
            f"SELECT {_SESSION} FROM (SELECT *, 0 AS o FROM sessions"
            " WHERE session_id=$2 AND space_id=$1 UNION ALL SELECT *, 1 FROM sessions"
            " WHERE space_id=$1 AND session_name=$2) x ORDER BY o LIMIT 1",
            space_id,
            session_id,
        )
        return None if r is None else Session.model_validate(dict(r))

    async def get(self, session_id: str) -> Session | None:
        r = await self.pool.fetchrow(
            f"SELECT {_SESSION} FROM sessions WHERE session_id=$1",
            session_id,
        )
        return None if r is None else Session.model_validate(dict(r))

    async def run(self, session_id: str, run_id: str) -> RunState | None:
        row = await self.pool.fetchrow(
            "SELECT main_instance_id, status, resumes, ends, refused_resumes FROM runs"
            " WHERE session_id=$1 AND run_id=$2",
            session_id,
            run_id,
        )
        return None if row is None else RunState(run_id, **dict(row))

    async def refusal(self, session_id: str, event_key: str) -> Refusal | None:
        o = await self.pool.fetchrow(
            "SELECT code, message FROM event_outcomes WHERE session_id=$1 AND event_key=$2",
            session_id,
            event_key,
        )
        return None if o is None else Refusal(o["code"], o["message"])

    async def settled(
        self, session_id: str, run_id: str, event_key: str
    ) -> tuple[Refusal | None, RunState | None]:
        r = await self.pool.fetchrow(
            "SELECT o.code, o.message, u.main_instance_id, u.status, u.resumes, u.ends,"
            " u.refused_resumes FROM (SELECT 1) one"
            f"{_OUTCOME} LEFT JOIN runs u ON u.session_id=$1 AND u.run_id=$2",
            session_id,
            run_id,
            event_key,
        )
        refusal = None if r["code"] is None else Refusal(r["code"], r["message"])
        if r["main_instance_id"] is None:
            return refusal, None
        run = RunState(
            run_id,
            r["main_instance_id"],
            r["status"],
            r["resumes"],
            r["ends"],
            r["refused_resumes"],
        )
        return refusal, run

    async def started(
        self, session_id: str, run_id: str, event_key: str
    ) -> tuple[Refusal | None, Snapshot | None]:
        r = await self.pool.fetchrow(
            "SELECT o.code, o.message, x.snapshot_id, x.session_id, x.run_id,"
            " u.main_instance_id, x.through_session_sequence, x.policy_revision,"
            " u.status AS run_status FROM (SELECT 1) one"
            f"{_OUTCOME} LEFT JOIN runs u ON u.session_id=$1 AND u.run_id=$2"
            " LEFT JOIN history_snapshots x ON x.snapshot_id = u.snapshot_id",
            session_id,
            run_id,
            event_key,
        )
        refusal = None if r["code"] is None else Refusal(r["code"], r["message"])
        if r["snapshot_id"] is None:
            return refusal, None
        fields = ("snapshot_id", "session_id", "run_id", "main_instance_id")
        more = ("through_session_sequence", "policy_revision", "run_status")
        return refusal, Snapshot(**{k: r[k] for k in (*fields, *more)})

    async def outcome(self, session_id: str, event_key: str) -> EventOutcome | None:
        r = await self.pool.fetchrow(
            "SELECT record_id, session_sequence, instance_sequence, kind FROM records"
            " WHERE session_id=$1 AND event_key=$2",
            session_id,
            event_key,
        )
        if r is not None:
            return EventOutcome.model_validate({"outcome": "committed", **dict(r)})
        o = await self.pool.fetchrow(
            "SELECT outcome, code, message FROM event_outcomes WHERE session_id=$1"
            " AND event_key=$2",
            session_id,
            event_key,
        )
        return None if o is None else EventOutcome.model_validate(dict(o))

    async def has_grant(self, session_id: str, actor_id: str) -> bool:
        return bool(
            await self.pool.fetchval(
                "SELECT 1 FROM session_grants WHERE session_id=$1 AND actor_id=$2",
                session_id,
                actor_id,
            )
        )

    async def add_grant(
        self, session_id: str, actor_id: str, granted_by: str, granted_by_key: str | None
    ) -> None:
        await self.pool.execute(
            "INSERT INTO session_grants (session_id, actor_id, granted_by, granted_by_key)"
            " VALUES ($1,$2,$3,$4) ON CONFLICT DO NOTHING",
            session_id,
            actor_id,
            granted_by,
            granted_by_key,
        )

    async def revoke_grant(
        self, session_id: str, actor_id: str, revoked_by: str, revoked_by_key: str | None
    ) -> bool:
        # One statement: the grant leaves the live table and its revocation is recorded
        # atomically (a crash between the two would lose the audit or keep the grant).
        row = await self.pool.fetchrow(
            "WITH gone AS (DELETE FROM session_grants WHERE session_id=$1 AND actor_id=$2"
            " RETURNING session_id, actor_id, granted_by, granted_by_key, created_at)"
            " INSERT INTO session_grant_revocations (session_id, actor_id, granted_by,"
            " granted_by_key, granted_at, revoked_by, revoked_by_key)"
            " SELECT session_id, actor_id, granted_by, granted_by_key, created_at, $3, $4"
            " FROM gone RETURNING actor_id",
            session_id,
            actor_id,
            revoked_by,
            revoked_by_key,
        )
        return row is not None
