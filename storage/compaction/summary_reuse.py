"""Summary reuse (R2.7): a summary revision as a view sees it, and whether it may serve a
run's view — the view it compacted must be an ordered prefix of this one. Which summary
of a lineage's chain a view takes is ``storage.compaction.view_state.load_view_state``'s
walk."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from domain.compaction.triggers import Counters
from storage.compaction.main_view import MAIN_VIEW

SUMMARY_COLUMNS = (
    "summary_id, parent_summary_id, view_run_id, view_through, source_watermark,"
    " covered_record_ids, counter_baseline"
)


@dataclass(frozen=True)
class SummaryRef:
    """What a view needs of a summary revision. Immutable once written (only its status
    changes, which is why the status is not part of it)."""

    summary_id: str
    parent_summary_id: str | None
    view_run_id: str
    view_through: int
    source_watermark: int
    covered_record_ids: tuple[str, ...]
    baseline: Counters  # R8.4: the counters observed by the check that started its job


def summary_ref(row: Any) -> SummaryRef:
    """A ``summary_revisions`` row (any mapping with its columns) as a ``SummaryRef``."""
    b = row["counter_baseline"] or {}
    return SummaryRef(
        row["summary_id"],
        row["parent_summary_id"],
        row["view_run_id"],
        int(row["view_through"]),
        int(row["source_watermark"]),
        tuple(row["covered_record_ids"]),
        Counters(int(b.get("user_turns", 0)), int(b.get("model_steps", 0))),
    )


async def reusable(
    conn: asyncpg.Connection, summary: SummaryRef, session_id: str, run_id: str, through: int
) -> bool:
    """R2.7: a summary may serve a run's view only if the view it compacted is an ordered
    prefix of this one — nothing of this view before its watermark is missing from it,
    and it covers nothing this view does not contain. (Status is the caller's concern.)"""
    if summary.view_run_id == run_id:
        return True
    # One round trip. Whether a record of this view before the summary's watermark is
    # missing from the view it compacted; and the records after this run's snapshot that
    # are not its own, checked against the covered ids here: they are few (other runs'
    # since this one started), while the covered ids grow with the history (``= ANY`` of
    # them cost ~20 ms per new run in the 1,000-question session, growing).
    r = await conn.fetchrow(
        "SELECT EXISTS (SELECT 1" + MAIN_VIEW + " AND r.session_sequence > $2"
        " AND r.session_sequence <= $3 AND r.run_id IS DISTINCT FROM $4"
        " AND (r.session_sequence <= $5 OR r.run_id = $6)) AS missing,"
        " ARRAY(SELECT record_id FROM records WHERE session_id=$1 AND session_sequence > $5"
        " AND run_id IS DISTINCT FROM $6) AS later",
        session_id,
        summary.view_through,
        summary.source_watermark,
        summary.view_run_id,
        through,
        run_id,
    )
    if r["missing"]:
        return False
    covered = set(summary.covered_record_ids)
    return not any(record_id in covered for record_id in r["later"])
