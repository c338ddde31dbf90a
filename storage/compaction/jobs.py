"""What the compaction service reads and writes in PostgreSQL (R11, R15.1, R15.3).

``CompactionJobs`` is the port the worker and the request loop depend on;
``PgCompactionJobs`` is its asyncpg adapter and the only place their SQL lives. The
service never commits a summary itself (the session processor does, R11.6): it reads the
job's view and saves the operation — the candidate outcome, before anything is
published — so that a redelivered job republishes it instead of calling the model again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg

from domain.compaction.core.job import ParentSummary as ParentSummary  # the port returns it
from domain.context.rendering import RecordView
from domain.frontier import Frontier
from domain.policy.context_policy import ContextPolicy, validate_policy
from domain.policy.parsed import policy_of
from storage.compaction import summaries
from storage.records.frontier import thread_frontier
from storage.records.threads import (
    inherited_range,
    records_by_id,
    thread_records,
    uncovered_records,
)


@dataclass(frozen=True)
class SavedOperation:
    """One row of ``compaction_operations``: the outcome of a job, saved before it is
    published (R15.1: the candidate summary and the model operation id)."""

    job_id: str
    status: str  # candidate_saved | failed | deferred
    stage: str
    outcome: bytes  # the encoded ControlEvent to publish
    model_operation_id: str | None
    model_calls: int
    error: str | None


@dataclass(frozen=True)
class ReleasePricing:
    """What a session's compaction is priced on: its release's policy and model profile
    (the profile as published: ``ModelProfile.from_dict`` reads it)."""

    policy: ContextPolicy
    model_profile: Mapping[str, Any]


class CompactionJobs(Protocol):
    """The compaction service's storage port."""

    async def job_status(self, job_id: str) -> str | None:
        """The processor's status of the job (``expired``: it gave up waiting)."""

    async def saved_outcome(self, job_id: str) -> bytes | None:
        """The outcome saved for the job by an earlier delivery, if any."""

    async def save_outcome(self, op: SavedOperation) -> bytes:
        """Save the outcome unless one is saved already; return the one that is saved
        now — ``op.outcome``, or the outcome a concurrent delivery saved first."""

    async def parent_summary(self, summary_id: str | None) -> ParentSummary | None:
        """The summary the job extends (None: the thread was never compacted)."""

    async def session_policy(self, session_id: str) -> ContextPolicy:
        """The session's release policy, parsed (R1.4: frozen at release)."""

    async def revocation_epoch(self, session_id: str) -> str:
        """Changes whenever a resource of the session is revoked or reactivated."""

    async def current_frontier(self, session_id: str, run_id: str, instance_id: str) -> Frontier:
        """The plan and constraints of the job's thread: no summary restates its plan as
        it is not (R11.4) nor its constraints (R11.5). (Its task version is not counted.)"""

    async def inherited_view(
        self, session_id: str, run_id: str, instance_id: str, covered: frozenset[str]
    ) -> tuple[list[RecordView], int]:
        """The records a thread sees from before its run, except ``covered`` ones (its
        parent summary's), and the run's snapshot boundary
        (``through_session_sequence``) — a child thread inherits none (R13.1)."""

    async def inherited_after(
        self, session_id: str, run_id: str, instance_id: str, after: int, covered: frozenset[str]
    ) -> tuple[list[RecordView], int] | None:
        """``inherited_view``'s records after sequence ``after`` only, and the boundary:
        what a history kept through ``after`` goes on with. None when none can: a child
        thread, or a run whose boundary is before ``after`` (a resumed older run)."""

    async def thread_view(
        self, session_id: str, run_id: str, instance_id: str, after: int, upto: int
    ) -> list[RecordView]:
        """The thread's own records with ``after < session_sequence <= upto``."""

    async def covered_records(
        self, session_id: str, ids: frozenset[str], max_tokens: int
    ) -> list[RecordView] | None:
        """The main-thread records among ``ids``, with their content, in session order;
        None when they hold more than ``max_tokens`` (what is not read is not loaded)."""


def _parent(row: asyncpg.Record) -> ParentSummary:
    return ParentSummary(
        summary=row["summary"],
        summary_text=row["summary_text"],
        summary_tokens=int(row["summary_tokens"]),
        covered_record_ids=frozenset(row["covered_record_ids"]),
        covered_ranges=tuple((int(a), int(b)) for a, b in row["covered_ranges"]),
    )


# Runs whose boundary and main instance a compaction process keeps (a few bytes each).
RUN_FACTS = 4096


class PgCompactionJobs:
    """``CompactionJobs`` over an asyncpg pool. Each method is one short read or one
    insert; none needs a transaction (the job's view only grows up to its watermark)."""

    def __init__(self, pool: asyncpg.Pool, runs: int = RUN_FACTS) -> None:
        self.pool = pool
        # (session, run) -> the run's snapshot boundary and main instance: both written
        # once, with the run. A job asks for them twice (its view and its frontier).
        self._runs: dict[tuple[str, str], tuple[int, str]] = {}
        self._runs_limit = runs

    async def _run_facts(
        self, conn: asyncpg.Connection, session_id: str, run_id: str
    ) -> tuple[int, str | None]:
        """A run's snapshot boundary (0 for a run not known) and its main instance."""
        key = (session_id, run_id)
        found = self._runs.get(key)
        if found is not None:
            return found
        row = await conn.fetchrow(
            "SELECT x.through_session_sequence AS through, u.main_instance_id FROM runs u"
            " LEFT JOIN history_snapshots x USING (snapshot_id)"
            " WHERE u.session_id=$1 AND u.run_id=$2",
            session_id,
            run_id,
        )
        if row is None or row["main_instance_id"] is None:
            return 0 if row is None else int(row["through"] or 0), None
        facts = (int(row["through"] or 0), str(row["main_instance_id"]))
        if len(self._runs) >= self._runs_limit:
            self._runs.clear()  # only a cache: each run is read again on its next use
        self._runs[key] = facts
        return facts

    async def job_status(self, job_id: str) -> str | None:
        status: str | None = await self.pool.fetchval(
            "SELECT status FROM compaction_jobs WHERE job_id=$1", job_id
        )
        return status

    async def saved_outcome(self, job_id: str) -> bytes | None:
        saved: bytes | None = await self.pool.fetchval(
            "SELECT outcome FROM compaction_operations WHERE job_id=$1", job_id
        )
        return saved

    async def save_outcome(self, op: SavedOperation) -> bytes:
        stored: bytes | None = await self.pool.fetchval(
            "INSERT INTO compaction_operations (job_id, status, stage, outcome,"
            " model_operation_id, model_calls, error) VALUES ($1,$2,$3,$4,$5,$6,$7)"
            " ON CONFLICT (job_id) DO NOTHING RETURNING outcome",
            op.job_id,
            op.status,
            op.stage,
            op.outcome,
            op.model_operation_id,
            op.model_calls,
            op.error,
        )
        if stored is not None:
            return stored
        # Another delivery of this job saved its outcome first; that one is the candidate.
        earlier = await self.saved_outcome(op.job_id)
        if earlier is None:  # outcome is nullable in the schema; we always write it
            raise LookupError(f"compaction operation {op.job_id} has no saved outcome")
        return earlier

    async def parent_summary(self, summary_id: str | None) -> ParentSummary | None:
        async with self.pool.acquire() as conn:
            row = await summaries.current_summary(conn, summary_id)
        return None if row is None else _parent(row)

    async def session_policy(self, session_id: str) -> ContextPolicy:
        row = await self.pool.fetchrow(
            "SELECT r.policy_revision, r.context_policy FROM sessions s"
            " JOIN releases r USING (release_id) WHERE s.session_id=$1",
            session_id,
        )
        if row is None:  # as before: an unknown session has the platform defaults
            return validate_policy(None)
        return policy_of(row["policy_revision"], row["context_policy"])

    async def release_pricing(self, session_id: str) -> ReleasePricing | None:
        """The session's release policy and model profile (what a compaction is priced
        on), or None for an unknown session."""
        row = await self.pool.fetchrow(
            "SELECT r.policy_revision, r.context_policy, r.model_profile FROM sessions s"
            " JOIN releases r USING (release_id) WHERE s.session_id=$1",
            session_id,
        )
        if row is None:
            return None
        policy = policy_of(row["policy_revision"], row["context_policy"])
        return ReleasePricing(policy, dict(row["model_profile"]))

    async def revocation_epoch(self, session_id: str) -> str:
        async with self.pool.acquire() as conn:
            return await summaries.revocation_epoch(conn, session_id)

    async def current_frontier(self, session_id: str, run_id: str, instance_id: str) -> Frontier:
        async with self.pool.acquire() as conn:
            _, main = await self._run_facts(conn, session_id, run_id)
            return await thread_frontier(
                conn, session_id, run_id, instance_id, main=main, tasks=False
            )

    async def inherited_view(
        self, session_id: str, run_id: str, instance_id: str, covered: frozenset[str]
    ) -> tuple[list[RecordView], int]:
        async with self.pool.acquire() as conn:
            through, main = await self._run_facts(conn, session_id, run_id)
            if main != instance_id:
                # A child thread summarizes its own records only (R13.1); the background
                # its parent transferred stays the parent's.
                return [], through
            # What the parent summary covers is never summarized again: a long history is
            # not read (with its content) for every job.
            return await uncovered_records(conn, session_id, through, covered), through

    async def inherited_after(
        self, session_id: str, run_id: str, instance_id: str, after: int, covered: frozenset[str]
    ) -> tuple[list[RecordView], int] | None:
        async with self.pool.acquire() as conn:
            through, main = await self._run_facts(conn, session_id, run_id)
            if main != instance_id or through < after:
                return None
            tail = await inherited_range(conn, session_id, after, through)
        return [r for r in tail if r.record_id not in covered], through

    async def thread_view(
        self, session_id: str, run_id: str, instance_id: str, after: int, upto: int
    ) -> list[RecordView]:
        async with self.pool.acquire() as conn:
            return await thread_records(conn, session_id, run_id, instance_id, after, upto)

    async def covered_records(
        self, session_id: str, ids: frozenset[str], max_tokens: int
    ) -> list[RecordView] | None:
        async with self.pool.acquire() as conn:
            tokens = await conn.fetchval(
                "SELECT coalesce(sum(token_count), 0) FROM records"
                " WHERE session_id=$1 AND record_id = ANY($2::text[])",
                session_id,
                list(ids),
            )
            if tokens > max_tokens:
                return None
            return await records_by_id(conn, session_id, list(ids))
