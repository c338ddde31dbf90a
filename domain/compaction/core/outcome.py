"""A job's outcome, typed: the ``CompactionOutcome`` the service saves and publishes,
its summary a ``SummaryBody`` (R11.6, R11.7, R15.1), or the stage and reason that stopped
it — the old view stays (R15.3)."""

from __future__ import annotations

from collections.abc import Sequence

from domain.compaction.core.job import Job
from domain.compaction.core.render import render_summary
from domain.compaction.drafts import SummaryDraft
from domain.compaction.text_rules import RuleDecision
from domain.context.selection import Group
from schemas.summary_body import RollupNote, SummaryBody
from schemas.wire import CompactionOutcome


def stopped(job: Job, stage: str, reason: str, status: str = "failed") -> CompactionOutcome:
    """The job ended without a summary at ``stage``."""
    return CompactionOutcome(
        job.req.job_id,
        status,
        stage,
        reason,
        parent_summary_id=job.req.parent_summary_id,
        model_calls=job.calls,
    )


def succeeded(
    job: Job,
    draft: SummaryDraft,
    covered: Sequence[Group],
    ranges: tuple[tuple[int, int], ...],
    rollup: RollupNote | None,
    rules: Sequence[RuleDecision],
) -> CompactionOutcome:
    """The candidate revision: ``draft`` rendered, covering ``covered`` and everything its
    parents covered (``ranges``), for the session processor to commit (R11.6)."""
    text = render_summary(draft, job.inputs.frontier.plan)
    new_ids = {i for g in covered for i in g.record_ids}
    parent = job.inputs.parent
    body = SummaryBody(
        draft.to_dict(),
        text,
        # R11.7: what the job kept verbatim on purpose (current task, recent groups,
        # pinned and unfinished groups) — referenced, not summarized.
        tuple(r.record_id for r in job.records if r.record_id not in new_ids),
        job.bound,
        rollup,
        tuple(d.to_dict() for d in rules),
    )
    return CompactionOutcome(
        job_id=job.req.job_id,
        status="succeeded",
        stage="save",
        summary_id=job.inputs.summary_id,
        parent_summary_id=job.req.parent_summary_id,
        summary_json=body.to_json(),
        covered_ranges=ranges,
        covered_record_ids=tuple(sorted(job.covered_before | new_ids)),
        source_watermark=max(g.last_sequence for g in covered),
        summary_tokens=job.inputs.count(text),
        covered_tokens=sum(g.tokens for g in covered) + (parent.summary_tokens if parent else 0),
        model_operation_id=job.op_id,
        model_calls=job.calls,
    )
