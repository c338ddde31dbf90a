"""The processor's writes and scans of ``compaction_state`` beyond lock/update
(``storage.compaction.summaries``): the view-token estimate, an observation already
checked, and a lineage's row locked with its session's context and job in flight."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from domain.compaction.control.effects import JobRow
from domain.compaction.triggers import Counters
from storage.compaction.main_view import MAIN_COUNTS, MAIN_VIEW
from storage.compaction.summaries import StateRow, last_attempt_of, lock_state, session_context


async def replace_view_tokens(
    conn: asyncpg.Connection, session_id: str, lineage: str, covered: int, summary: int
) -> None:
    """A committed summary replaces ``covered`` tokens of the view by ``summary`` tokens."""
    await conn.execute(
        "UPDATE compaction_state SET view_tokens = view_tokens - $3 + $4"
        " WHERE session_id=$1 AND lineage=$2",
        session_id,
        lineage,
        covered,
        summary,
    )


@dataclass(frozen=True)
class Checked:
    """An observation already checked (its trigger report) and the job it started."""

    job_id: str | None
    job_status: str | None
    job_request: dict[str, Any] | None


# A lineage's row (locked), its session's counters and sequence, its release's policy
# and profile, and the job in flight: what a control decision starts from.
_LOCKED = (
    "SELECT c.session_id, c.lineage, c.policy_revision AS state_policy,"
    " c.current_summary_id, c.baseline_user_turns, c.baseline_model_steps,"
    " c.last_attempt, c.active_job_id, c.attempts,"
    " s.user_turns, s.model_steps, s.next_session_sequence, r.policy_revision,"
    " r.context_policy, r.model_profile, j.status AS job_status, j.lineage AS job_lineage,"
    " j.run_id AS job_run_id, j.instance_id AS job_instance_id, j.request AS job_request,"
    " j.observed_user_turns AS job_turns, j.observed_model_steps AS job_steps,"
    # The trigger report of the observation ``$3`` (NULL: none), if it was checked already,
    # and the job it started.
    " t.report_id AS checked, t.job_id AS checked_job_id, tj.status AS checked_status,"
    " tj.request AS checked_request, a.turns AS later_turns, a.steps AS later_steps"
    " FROM compaction_state c JOIN sessions s ON s.session_id = c.session_id"
    " JOIN releases r ON r.release_id = s.release_id"
    " LEFT JOIN compaction_jobs j ON j.job_id = c.active_job_id"
    " LEFT JOIN LATERAL (SELECT report_id, job_id FROM trigger_reports"
    "   WHERE session_id = $1 AND event_key = $3 LIMIT 1) t ON true"
    " LEFT JOIN compaction_jobs tj ON tj.job_id = t.job_id"
    # What the main view of run $5 counts after sequence $4 (NULL: not asked), as
    # ``view_state.counted_after`` reads it: the run's snapshot boundary is its view's.
    f" CROSS JOIN LATERAL ({MAIN_COUNTS}{MAIN_VIEW} AND $4::bigint IS NOT NULL"
    " AND r.session_sequence > $4 AND (r.run_id = $5 OR r.session_sequence <= coalesce("
    "   (SELECT x.through_session_sequence FROM runs w JOIN history_snapshots x"
    "    USING (snapshot_id) WHERE w.session_id = $1 AND w.run_id = $5), 0))) a"
    " WHERE c.session_id=$1 AND c.lineage=$2 FOR UPDATE OF c"
)


@dataclass(frozen=True)
class Locked:
    """A lineage's ``compaction_state`` row, locked, with what its decisions read beside
    it: ``context`` has the columns of ``summaries.session_context``."""

    row: StateRow
    context: Any
    job: JobRow | None  # the row's job in flight, if it is known
    checked: Checked | None = None  # the observation asked about, if checked already
    # What the run's main view counts after the watermark asked about (None: not asked).
    later: Counters | None = None


async def lock_with_context(
    conn: asyncpg.Connection,
    session_id: str,
    lineage: str,
    event_key: str | None = None,
    after: tuple[int, str] | None = None,
) -> Locked:
    """``summaries.session_context``, ``summaries.lock_state`` and the job in flight in
    one round trip once the lineage has its row (rows are never deleted); its first
    decision inserts it. With ``event_key`` (an observation's), whether that observation
    was checked already (its trigger report), read under the same lock. With ``after``
    (a watermark and a run), what the run's main view counts after the watermark."""
    watermark, run_id = after if after is not None else (None, None)
    args = (session_id, lineage, event_key, watermark, run_id)
    r = await conn.fetchrow(_LOCKED, *args)
    if r is None:
        ctx = await session_context(conn, session_id)
        await lock_state(conn, session_id, lineage, ctx["policy_revision"])
        r = await conn.fetchrow(_LOCKED, *args)
        assert r is not None
    row = StateRow(
        r["session_id"],
        r["lineage"],
        r["state_policy"],
        r["current_summary_id"],
        Counters(r["baseline_user_turns"], r["baseline_model_steps"]),
        last_attempt_of(r["last_attempt"]),
        r["active_job_id"],
        int(r["attempts"]),
    )
    job = None
    if r["active_job_id"] is not None and r["job_status"] is not None:
        job = JobRow(
            r["active_job_id"],
            r["job_status"],
            r["job_lineage"],
            r["job_run_id"],
            r["job_instance_id"],
            r["job_request"],
            Counters(r["job_turns"], r["job_steps"]),
        )
    checked = None
    if r["checked"] is not None:
        checked = Checked(r["checked_job_id"], r["checked_status"], r["checked_request"])
    later = None if after is None else Counters(int(r["later_turns"]), int(r["later_steps"]))
    return Locked(row, r, job, checked, later)
