"""Compaction state, trigger reports, jobs and summary revisions (migration 002).

Called by the session processor inside its batch transaction (it is the only writer of
these rows), and read by Prepare and the compaction service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from domain.compaction.triggers import CompactionState, Counters, LastAttempt, TriggerDecision
from storage.compaction.main_view import MAIN_VIEW
from storage.compaction.summary_reuse import reusable, summary_ref
from storage.compaction.withdrawals import revocation_epoch as revocation_epoch
from storage.compaction.withdrawals import revoked_records as revoked_records


@dataclass(frozen=True)
class StateRow:
    session_id: str
    lineage: str
    policy_revision: str
    current_summary_id: str | None
    baseline: Counters
    last_attempt: LastAttempt | None
    active_job_id: str | None
    attempts: int = 0


def last_attempt_of(raw: Any) -> LastAttempt | None:
    """The ``last_attempt`` column read back: the one parser of what ``_columns`` in
    ``storage.compaction.control`` writes there, ``dataclasses.asdict`` of the record."""
    if not raw:
        return None
    c = raw["counters"]
    return LastAttempt(
        raw["fingerprint"],
        raw["compressible_tokens"],
        Counters(c["user_turns"], c["model_steps"]),
        raw["input_budget"],
        raw["required_tokens"],
        raw.get("rebuild") or "",
    )


async def lock_state(
    conn: asyncpg.Connection, session_id: str, lineage: str, policy_revision: str
) -> StateRow:
    await conn.execute(
        "INSERT INTO compaction_state (session_id, lineage, policy_revision) VALUES ($1,$2,$3)"
        " ON CONFLICT DO NOTHING",
        session_id,
        lineage,
        policy_revision,
    )
    r = await conn.fetchrow(
        "SELECT * FROM compaction_state WHERE session_id=$1 AND lineage=$2 FOR UPDATE",
        session_id,
        lineage,
    )
    assert r is not None
    return StateRow(
        r["session_id"],
        r["lineage"],
        r["policy_revision"],
        r["current_summary_id"],
        Counters(r["baseline_user_turns"], r["baseline_model_steps"]),
        last_attempt_of(r["last_attempt"]),
        r["active_job_id"],
        int(r["attempts"]),
    )


def to_state(row: StateRow, totals: Counters) -> CompactionState:
    return CompactionState(totals=totals, baseline=row.baseline, last_attempt=row.last_attempt)


async def session_context(conn: asyncpg.Connection, session_id: str) -> asyncpg.Record:
    r = await conn.fetchrow(
        "SELECT s.user_turns, s.model_steps, s.next_session_sequence, r.policy_revision,"
        " r.context_policy, r.model_profile"
        " FROM sessions s JOIN releases r USING (release_id) WHERE s.session_id=$1",
        session_id,
    )
    assert r is not None
    return r


async def task_version(conn: asyncpg.Connection, session_id: str, through: int) -> int:
    """User inputs and supplements up to the job's view watermark ``through``: the task
    state the job saw (R11.6). Input after the watermark is not a conflict — it is never
    covered, the current task is pinned, and it is rendered after the summary — so it no
    longer discards a finished job (jobs wasted after their model call)."""
    # Main threads only: a child's task or supplement never fails the parent's commit.
    n = await conn.fetchval(
        "SELECT count(*)"
        + MAIN_VIEW
        + " AND r.kind IN ('user_input', 'supplement') AND r.session_sequence <= $2",
        session_id,
        through,
    )
    return int(n)


async def insert_report(
    conn: asyncpg.Connection,
    session_id: str,
    lineage: str,
    run_id: str,
    event_key: str,
    d: TriggerDecision,
    decision: str,
    reason: str | None,
    job_id: str | None,
    policy_revision: str,
    view_watermark: int,
    totals: Counters,
    baseline: Counters,
    then: Mapping[str, Any] | None = None,
) -> None:
    """A trigger report; with ``then``, ``update_lineage``'s changes of the same lineage
    in the same statement (one round trip)."""
    args: list[Any] = [
        session_id,
        lineage,
        run_id,
        event_key,
        list(d.fired),
        d.values,
        d.thresholds,
        decision,
        reason,
        job_id,
        policy_revision,
        view_watermark,
        {"totals": totals.__dict__, "baseline": baseline.__dict__},
    ]
    sql = (
        "INSERT INTO trigger_reports (session_id, lineage, run_id, event_key, fired, values,"
        " thresholds, decision, reason, job_id, policy_revision, view_watermark, counters)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13)"
    )
    if then:
        sql = f"WITH report AS ({sql}) {_update_sql(then, args)}"
    await conn.execute(sql, *args)


async def update_state(conn: asyncpg.Connection, row: StateRow, **changes: Any) -> None:
    await update_lineage(conn, row.session_id, row.lineage, changes)


async def update_lineage(
    conn: asyncpg.Connection, session_id: str, lineage: str, changes: Mapping[str, Any]
) -> None:
    """Set ``changes`` (column -> value) on a lineage's ``compaction_state`` row."""
    args: list[Any] = [session_id, lineage]
    await conn.execute(_update_sql(changes, args), *args)


def _update_sql(changes: Mapping[str, Any], args: list[Any]) -> str:
    """The UPDATE of ``changes`` on the lineage of ``args``' first two (session id,
    lineage); the values are appended to ``args``."""
    cols = []
    for k, v in changes.items():
        args.append(v)
        cols.append(f"{k}=${len(args)}")
    return (
        f"UPDATE compaction_state SET {', '.join(cols)}, updated_at=now()"
        " WHERE session_id=$1 AND lineage=$2"
    )


async def insert_job(
    conn: asyncpg.Connection,
    job_id: str,
    session_id: str,
    lineage: str,
    run_id: str,
    instance_id: str,
    request: dict[str, Any],
    observed: Counters,
) -> None:
    await conn.execute(
        "INSERT INTO compaction_jobs (job_id, session_id, lineage, run_id, instance_id, status,"
        " request, observed_user_turns, observed_model_steps)"
        " VALUES ($1,$2,$3,$4,$5,'requested',$6,$7,$8)",
        job_id,
        session_id,
        lineage,
        run_id,
        instance_id,
        request,
        observed.user_turns,
        observed.model_steps,
    )


async def job(conn: asyncpg.Connection, job_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT * FROM compaction_jobs WHERE job_id=$1", job_id)


async def finish_job(
    conn: asyncpg.Connection, job_id: str, status: str, stage: str | None, reason: str | None
) -> None:
    await conn.execute(
        "UPDATE compaction_jobs SET status=$2, stage=$3, reason=$4, finished_at=now()"
        " WHERE job_id=$1",
        job_id,
        status,
        stage,
        reason,
    )


async def missing_records(conn: asyncpg.Connection, session_id: str, ids: list[str]) -> int:
    found = await conn.fetchval(
        "SELECT count(*) FROM records WHERE session_id=$1 AND record_id = ANY($2::text[])",
        session_id,
        ids,
    )
    return len(set(ids)) - int(found)


async def insert_summary(conn: asyncpg.Connection, **row: Any) -> None:
    row["covered_ranges"] = [list(r) for r in row["covered_ranges"]]
    cols = ", ".join(row)
    marks = ", ".join(f"${i}" for i in range(1, len(row) + 1))
    await conn.execute(f"INSERT INTO summary_revisions ({cols}) VALUES ({marks})", *row.values())


async def current_summary(
    conn: asyncpg.Connection, summary_id: str | None
) -> asyncpg.Record | None:
    if summary_id is None:
        return None
    return await conn.fetchrow("SELECT * FROM summary_revisions WHERE summary_id=$1", summary_id)


async def compatible(
    conn: asyncpg.Connection, summary: asyncpg.Record, session_id: str, run_id: str, through: int
) -> bool:
    """R2.7 reuse of a summary row by a run's view
    (``storage.compaction.summary_reuse.reusable``)."""
    return await reusable(conn, summary_ref(summary), session_id, run_id, through)


def summary_baseline(summary: asyncpg.Record | None) -> Counters:
    if summary is None:
        return Counters()
    b = summary["counter_baseline"]
    return Counters(int(b["user_turns"]), int(b["model_steps"]))


async def child_counters(
    conn: asyncpg.Connection, session_id: str, run_id: str, instance_id: str
) -> Counters:
    """R13.1/R8.3: a child thread counts on its own — its tasks and its valid steps."""
    r = await conn.fetchrow(
        "SELECT count(*) FILTER (WHERE kind IN ('user_input')) AS turns,"
        " count(*) FILTER (WHERE kind = 'assistant_message'"
        " AND payload->>'purpose' = 'action') AS steps FROM records"
        " WHERE session_id=$1 AND run_id=$2 AND instance_id=$3",
        session_id,
        run_id,
        instance_id,
    )
    return Counters(int(r["turns"]), int(r["steps"]))


async def lineage_summary(
    conn: asyncpg.Connection, session_id: str, lineage: str
) -> asyncpg.Record | None:
    """A child lineage's own newest valid summary (a single thread: always a prefix)."""
    sid = await conn.fetchval(
        "SELECT current_summary_id FROM compaction_state WHERE session_id=$1 AND lineage=$2",
        session_id,
        lineage,
    )
    s = await current_summary(conn, sid)
    return s if s is not None and s["status"] == "committed" else None


async def thread_task_version(
    conn: asyncpg.Connection, session_id: str, run_id: str, instance_id: str, through: int
) -> int:
    n = await conn.fetchval(
        "SELECT count(*) FROM records WHERE session_id=$1 AND run_id=$2 AND instance_id=$3"
        " AND kind IN ('user_input', 'supplement') AND session_sequence <= $4",
        session_id,
        run_id,
        instance_id,
        through,
    )
    return int(n)
