"""Prepare's reads of compaction state (R2.7, R8, R9): a view's state through
``storage.compaction.view_state.load_view_state`` (the one place its rules live), the text of the
summary it shows, and what the processor decided about an observation.

Summary rows and "may run R reuse summary S" are immutable facts: cached (summaries in
a bounded LRU), so the common case costs one round trip.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NotRequired, Protocol, TypedDict

import asyncpg

from schemas.errors import NotFound
from storage.compaction.view_state import MainRow, ViewState, ViewStateCache, load_view_state
from storage.records.threads import SummaryView

SUMMARY_CACHE = 1024  # summaries (with their covered ids) kept per Prepare process


class JobStatus(TypedDict):
    """What became of the compaction a prepare waited for: the job's ``status`` (or the
    processor's decision when it started none, or ``timeout``), its stage and reason,
    and its id when one ran. Reported in a refusal's details (``job``)."""

    status: str
    reason: NotRequired[str | None]
    stage: NotRequired[str | None]
    job_id: NotRequired[str]


class CompactionReads(Protocol):
    """Port: compaction state as Prepare reads it."""

    async def state(
        self,
        session_id: str,
        run_id: str,
        through: int,
        child_instance_id: str | None = None,
        row: MainRow | None = None,
    ) -> ViewState:
        """The view's compaction state (``storage.compaction.view_state``: R2.6, R2.7, R13.1);
        ``row``: a main view's row the caller read with its own reads."""

    async def summary(self, summary_id: str) -> SummaryView | None: ...

    async def observation_outcome(self, session_id: str, event_key: str) -> JobStatus | None:
        """What became of an observation: None while undecided or while the job it
        started is still requested; else the decision or the job's status."""

    async def idle_ms(self, session_id: str) -> int | None:
        """Milliseconds since the session's last model call was checked by the gateway
        (just before the runtime sent it); None before its first."""


class PgCompactionReads:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self._facts = ViewStateCache()
        # Revisions are immutable, so cached without expiry, but bounded: each holds its
        # covered ids, and a long-running instance sees every session's summaries.
        self._summaries: OrderedDict[str, SummaryView] = OrderedDict()

    async def state(
        self,
        session_id: str,
        run_id: str,
        through: int,
        child_instance_id: str | None = None,
        row: MainRow | None = None,
    ) -> ViewState:
        async with self.pool.acquire() as conn:
            state = await load_view_state(
                conn,
                session_id,
                run_id,
                child_instance_id=child_instance_id,
                through=through,
                cache=self._facts,
                row=row,
            )
        if state is None:
            raise NotFound(f"session {session_id} not found")
        return state

    async def summary(self, summary_id: str) -> SummaryView | None:
        cached = self._summaries.get(summary_id)
        if cached is not None:
            self._summaries.move_to_end(summary_id)
        else:
            r = await self.pool.fetchrow(
                "SELECT summary_text, summary_tokens, covered_record_ids FROM"
                " summary_revisions WHERE summary_id=$1",
                summary_id,
            )
            if r is None:
                return None
            cached = SummaryView(
                summary_id,
                r["summary_text"],
                r["summary_tokens"],
                frozenset(r["covered_record_ids"]),
            )
            self._summaries[summary_id] = cached
            while len(self._summaries) > SUMMARY_CACHE:
                self._summaries.popitem(last=False)
        return cached

    async def observation_outcome(self, session_id: str, event_key: str) -> JobStatus | None:
        rep = await self.pool.fetchrow(
            "SELECT decision, reason, job_id FROM trigger_reports WHERE session_id=$1"
            " AND event_key=$2",
            session_id,
            event_key,
        )
        if rep is None:
            return None
        if rep["job_id"] is None:
            return JobStatus(status=rep["decision"], reason=rep["reason"])
        job = await self.pool.fetchrow(
            "SELECT status, stage, reason FROM compaction_jobs WHERE job_id=$1", rep["job_id"]
        )
        if job is None or job["status"] == "requested":
            return None
        return JobStatus(
            status=job["status"], stage=job["stage"], reason=job["reason"], job_id=rep["job_id"]
        )

    async def idle_ms(self, session_id: str) -> int | None:
        # Both times are the database's: no clock of ours is compared with it.
        idle = await self.pool.fetchval(
            "SELECT (extract(epoch FROM now() - max(created_at)) * 1000)::bigint"
            " FROM model_calls WHERE session_id=$1",
            session_id,
        )
        return None if idle is None else max(0, int(idle))
