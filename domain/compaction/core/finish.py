"""The summarizer's answers turned into the job's outcome (R11.2-R11.8): the drafts
merged after the parent's entries, brought within the bound (summarized again from the
records, or rolled up), patched by the after hooks, framed by the text rules, fitted,
checked for coverage and rendered. ``finish_job`` takes one answer at a time: where the
bound or a hook needs more I/O, it returns that step, and the service answers it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from domain.compaction.bound import fit_draft
from domain.compaction.core.job import Job
from domain.compaction.core.outcome import stopped, succeeded
from domain.compaction.core.plan import after_before_hooks, requests
from domain.compaction.core.render import draft_room
from domain.compaction.core.rollup import fitted, rolled_up, rollup_requests
from domain.compaction.core.steps import (
    HOOK_AFTER,
    Answer,
    AskAfter,
    AskBefore,
    Drafts,
    Failure,
    Keep,
    Pending,
    ReadCovered,
    RollUp,
    Step,
    Summarize,
    binds,
)
from domain.compaction.drafts import SummaryDraft
from domain.compaction.errors import InvalidSummary
from domain.compaction.sources import merge_job, merge_ranges
from domain.compaction.text_rules import apply_text_rules
from domain.compaction.validate import check_coverage
from domain.context.rendering import RecordView
from domain.context.selection import Group, build_groups, segment
from schemas.summary_body import RollupNote


def finish_job(step: Pending, answer: Answer) -> Step:
    """The job one answer further: its outcome, or the next step that waits on I/O."""
    if isinstance(answer, Failure):
        return stopped(step.job, answer.stage, answer.reason)
    if isinstance(step, AskBefore) and isinstance(answer, Keep):
        return after_before_hooks(step, answer)
    if isinstance(step, Summarize) and isinstance(answer, Drafts):
        return _summarized(step, answer)
    if isinstance(step, ReadCovered) and not isinstance(answer, Keep | Drafts | SummaryDraft):
        return _reread(step, answer)
    if isinstance(step, RollUp) and isinstance(answer, Drafts):
        return _rolled_up(step, answer)
    if isinstance(step, AskAfter) and isinstance(answer, SummaryDraft):
        return _final(step.job, answer, step.covered, step.rollup)
    raise TypeError(f"{type(step).__name__} is not answered by {type(answer).__name__}")


def _summarized(step: Summarize, answer: Drafts) -> Step:
    """The segments' drafts merged after the parent's entries (or, re-derived, after
    nothing: the parent's records are among the segments)."""
    job = step.job.called(answer.calls)
    if answer.failure is not None:
        return stopped(job, answer.failure.stage, answer.failure.reason)
    records = [job.by_id[i] for s in step.segments for g in s.groups for i in g.record_ids]
    items = [item for r in step.requests for item in r.segment]
    rederived = step.rederive_from is not None
    parent = job.inputs.parent if not rederived else None
    merged = merge_job(parent.summary if parent else None, answer.drafts, items, records)
    if step.rederive_from is not None:
        before = len(job.covered_before)
        note = RollupNote(
            calls=job.calls - step.rederive_from,
            rederived=before,  # the parent's records, read again
            entries_in=before + sum(len(g.record_ids) for g in step.covered),
        )
        return _bounded(job, merged, step.covered, note)
    if job.inputs.count(merged.text()) <= job.bound:
        return _bounded(job, merged, step.covered, None)
    # Over the bound (R11.8). A roll-up decides again from what earlier jobs kept, so
    # what one drops is lost at every later one; while the covered records are all in
    # the view and at most ``rederive_tokens`` (set only for a summarizer that calls no
    # model, whose cost is CPU), the records decide instead, as a one-shot summary would.
    room = job.inputs.limits.rederive_tokens - sum(g.tokens for g in step.covered)
    if job.inputs.parent is not None and room > 0:
        return ReadCovered(job, merged, step.covered, room)
    return _roll_up(job, merged, step.covered)


def _reread(step: ReadCovered, history: Sequence[RecordView] | None) -> Step:
    """The parent's records read again: everything the job covers summarized from its
    records — unless one is missing (another thread's, or withdrawn): then a roll-up."""
    job = step.job
    if history is None or len(history) != len(step.ids):
        return _roll_up(job, step.merged, step.covered)
    job = dataclasses.replace(job, by_id={**job.by_id, **{r.record_id: r for r in history}})
    groups = [*build_groups(history), *step.covered]
    segments = segment(groups, job.inputs.limits.segment_tokens)
    reqs = requests(job, segments, with_parent=False)
    return Summarize(job, tuple(segments), reqs, step.covered, rederive_from=job.calls)


def _roll_up(job: Job, merged: SummaryDraft, covered: tuple[Group, ...]) -> Step:
    limits, plan = job.inputs.limits, job.inputs.frontier.plan
    if job.inputs.policy.compaction.rolls_up_by(limits.billed) == "fit":
        kept, note = fitted(merged, job.bound, job.inputs.count, job.req.parent_summary_id)
        return _bounded(job, kept, covered, note)
    reqs, entries = rollup_requests(
        merged, job.bound, job.op_id, plan, limits.segment_tokens, job.inputs.count
    )
    return RollUp(job, merged, covered, reqs, entries)


def _rolled_up(step: RollUp, answer: Drafts) -> Step:
    job = step.job.called(answer.calls)
    error = answer.failure.code if answer.failure is not None else None
    note = RollupNote(
        calls=answer.calls, requests=len(step.requests), entries_in=step.entries_in, error=error
    )
    rolled, note = rolled_up(step.merged, answer.drafts, note, job.bound, job.req.parent_summary_id)
    return _bounded(job, rolled, step.covered, note)


def _bounded(
    job: Job, merged: SummaryDraft, covered: tuple[Group, ...], rollup: RollupNote | None
) -> Step:
    if binds(job, HOOK_AFTER):
        return AskAfter(job, merged, covered, rollup)
    return _final(job, merged, covered, rollup)


def _final(
    job: Job, merged: SummaryDraft, covered: tuple[Group, ...], rollup: RollupNote | None
) -> Step:
    """The text rules, the fit, the coverage check, the rendered outcome."""
    frontier, count = job.inputs.frontier, job.inputs.count
    # R11.4/R11.5: what the words of an entry say frames that entry, never fails the job.
    merged, rules = apply_text_rules(merged, frontier.plan, frontier.declared)
    # the bound holds whatever a model or a hook answered (R11.2).
    merged, fitted = fit_draft(merged, draft_room(job.bound, frontier.plan, count), count)
    if fitted:  # on top of what a ``fit`` roll-up dropped already
        before = (rollup.fitted_out if rollup else None) or 0
        rollup = dataclasses.replace(rollup or RollupNote(), fitted_out=before + fitted)
    if rollup is not None:
        rollup = dataclasses.replace(rollup, entries_out=len(merged.all_facts()))
    # R11.4: every covered record is cited or in a covered range; every citation is a
    # record this summary covers (through its parents).
    parent = job.inputs.parent
    ranges = merge_ranges(covered, parent.covered_ranges if parent else ())
    new = {i: job.by_id[i].session_sequence for g in covered for i in g.record_ids}
    try:
        check_coverage(merged, new, ranges, earlier=job.covered_before)
    except InvalidSummary as exc:
        return stopped(job, "validate", invalid_reason(exc))
    return succeeded(job, merged, covered, ranges, rollup, rules)


def invalid_reason(exc: InvalidSummary) -> str:
    return f"invalid_summary:{exc.details.get('reason')}"
