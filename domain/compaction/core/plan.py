"""A job planned from its inputs, in one call (R11.1-R11.3): what it covers, in which
segments, and the summarizer's request for each — or why it covers nothing (deferred)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from domain.compaction.bound import MIN_BOUND, summary_bound
from domain.compaction.core.job import Job, JobInputs
from domain.compaction.core.outcome import stopped
from domain.compaction.core.steps import HOOK_BEFORE, AskBefore, Keep, Step, Summarize, binds
from domain.compaction.drafts import SummaryRequest
from domain.compaction.sources import source_items
from domain.context.selection import (
    Segment,
    Selection,
    build_groups,
    current_task_ids,
    segment,
    select_prefix,
)
from domain.window.retention import retained_record_ids

CHARS_PER_TOKEN = 4  # to clip an old, unbounded parent summary before it is sent


def plan_job(inputs: JobInputs) -> Step:
    """The job's first step: the release's before hooks when it binds any and there is
    something to cover, else the summarizer's calls — or a deferred outcome."""
    before = inputs.parent.covered_record_ids if inputs.parent else frozenset()
    records = tuple(r for r in inputs.view if r.record_id not in before)
    policy, req = inputs.policy, inputs.req
    bound = summary_bound(policy.compaction.summary_max_ratio, req.input_budget)
    job = Job(
        inputs,
        records,
        bound,
        min(inputs.limits.output_tokens or bound, bound),
        {r.record_id: r for r in records},
    )
    # R4.4/R10.1/R11.1: the current task (the run's question and its supplements) is
    # required — never summarized — and so is what the release's retention rules keep
    # verbatim. Active skills are not pinned: once their load group is summarized, the
    # assembler re-provides the instruction from the same revision, exactly once (R12.3).
    pinned = current_task_ids(records, req.run_id) | retained_record_ids(
        records, req.run_id, policy.retention_rules
    )
    groups = tuple(build_groups(records))
    selection = select_prefix(groups, keep_recent=policy.recent_complete_groups, pinned=pinned)
    if selection.covered and binds(job, HOOK_BEFORE):
        candidates = tuple(i for g in selection.covered for i in g.record_ids)
        return AskBefore(job, groups, pinned, candidates)
    return _summarize(job, selection)


def after_before_hooks(step: AskBefore, keep: Keep) -> Step:
    """``context.compact.before`` (R14) answered: more records kept verbatim, maybe a
    tighter summary."""
    job = step.job
    if keep.max_output_tokens:
        job = replace(job, output_tokens=min(job.output_tokens, keep.max_output_tokens))
    recent = job.inputs.policy.recent_complete_groups
    selection = select_prefix(step.groups, keep_recent=recent, pinned=step.pinned | keep.record_ids)
    return _summarize(job, selection)


def _summarize(job: Job, selection: Selection) -> Step:
    if not selection.covered:
        reason = selection.deferral_reason or "nothing_compressible"
        return stopped(job, "select", reason, status="deferred")
    segments = segment(selection.covered, job.inputs.limits.segment_tokens)
    # R11.3: bounded calls. Cover only the segments we may summarize; the rest stays
    # verbatim for a later job.
    segments = segments[: max(1, job.req.max_calls)]
    covered = tuple(g for s in segments for g in s.groups)
    return Summarize(job, tuple(segments), requests(job, segments), covered)


def requests(
    job: Job, segments: Sequence[Segment], with_parent: bool = True
) -> tuple[SummaryRequest, ...]:
    """The summarizer's request for each segment: its records as the summarizer sees
    them, the parent summary's text as context (clipped to the bound: an old, unbounded
    one is never sent whole, R11.2), the segment's share of the bound, and the agent's own
    request to continue when it shows the segment (issue 39 item 3)."""
    parent = job.inputs.parent if with_parent else None
    previous = parent.summary_text[: job.bound * CHARS_PER_TOKEN] if parent else None
    total = sum(seg.tokens for seg in segments) or 1
    agent, frontier = job.inputs.agent, job.inputs.frontier
    out: list[SummaryRequest] = []
    for i, seg in enumerate(segments):
        items = source_items(seg, job.by_id)
        # R11.2: the segments share the bound by their size.
        share = max(MIN_BOUND, job.bound * seg.tokens // total)
        shown = agent is not None and agent.shows(
            items, job.req.parent_summary_id, job.covered_before
        )
        out.append(
            SummaryRequest(
                items,
                previous,
                min(job.output_tokens, share),
                f"{job.op_id}:{i}",
                plan=frontier.plan,
                constraints=frontier.declared,
                fork=agent.body if agent is not None and shown else None,
            )
        )
    return tuple(out)
