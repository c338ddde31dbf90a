"""Whether a compaction result may be committed (R8.4, R11.6, R15.3). Pure.

The session processor applies a summary only if the versions the job depended on still
hold; otherwise the old view stays and the baseline does not move. A summary that does
not really shrink what it covers is refused too — "no real reduction" never moves the
baseline.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Dependencies:
    summary_id: str | None  # the thread's current summary (the new one's parent)
    policy_revision: str
    task_version: int  # user inputs + supplements in the lineage, up to the job's watermark
    plan_version: int = 0  # the thread's plan updates
    constraints_version: int = 0  # the constraint records of the thread's view


@dataclass(frozen=True)
class Candidate:
    parent_summary_id: str | None
    policy_revision: str
    task_version: int
    summary_tokens: int
    covered_tokens: int
    summary_empty: bool
    covered_records_missing: int
    covered_records_revoked: int = 0  # derived from a resource revoked since the job began
    plan_version: int = 0  # the versions the job started on
    constraints_version: int = 0


@dataclass(frozen=True)
class CommitDecision:
    commit: bool
    reason: str | None = None


def decide_commit(current: Dependencies, cand: Candidate) -> CommitDecision:
    if cand.summary_empty:
        return CommitDecision(False, "empty_summary")
    if cand.covered_records_missing:
        return CommitDecision(False, "covered_records_missing")
    if cand.covered_records_revoked:
        # R11.6: resource and grant versions are dependencies too.
        return CommitDecision(False, "version_conflict:resource_revoked")
    if current.summary_id != cand.parent_summary_id:
        return CommitDecision(False, "version_conflict:parent_summary")
    if current.policy_revision != cand.policy_revision:
        return CommitDecision(False, "version_conflict:policy")
    if current.task_version != cand.task_version:
        # the task the job saw (input up to its watermark) changed. Input after the
        # watermark is not a conflict: it is never covered and renders after the summary.
        return CommitDecision(False, "version_conflict:task")
    if current.constraints_version != cand.constraints_version:
        # A constraint was set or retired while the job ran: the state the job composed
        # the summary beside changed (R11.5, R11.6).
        return CommitDecision(False, "version_conflict:constraints")
    # A plan that moved while the job ran is no conflict: what the summary says of plan
    # items is dated to the plan it was written under (domain.compaction.text_rules), and
    # the plan renders from its own record — a plan update never wastes a finished job.
    if cand.summary_tokens >= cand.covered_tokens:
        return CommitDecision(False, "no_real_reduction")
    return CommitDecision(True)


def to_verify(
    covered: Sequence[str],
    parent_summary_id: str | None,
    current_summary_id: str | None,
    current_covered: Collection[str],
) -> list[str]:
    """Which of a candidate's ``covered`` record ids must be looked for (R15.3:
    ``covered_records_missing``). Those its parent covers, when the parent is the
    current summary, were looked for when it was committed, and no record is ever
    deleted: only the others are (a long session's covered history is not counted
    again at every commit). With another parent, every id is."""
    if current_summary_id is None or current_summary_id != parent_summary_id:
        return list(covered)
    known = frozenset(current_covered)
    return [i for i in covered if i not in known]


def budget_after(budget_before: int, covered_tokens: int, summary_tokens: int) -> int:
    return budget_before - covered_tokens + summary_tokens
