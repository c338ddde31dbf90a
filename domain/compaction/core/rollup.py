"""Hierarchical re-summarization (R11.8): a summary over its bound, its entries
summarized again as one summary within it. ``rollup_requests`` makes the summarizer's
requests, each at most one segment's worth of entries (R11.2); ``rolled_up`` joins
their drafts — or, if the summarizer failed, keeps the draft for the deterministic fit
to bound: a roll-up never leaves the session uncompactable. ``fitted`` is the roll-up
without a call (``compaction.rollup`` ``fit``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from domain.compaction.authored import keep_recorded
from domain.compaction.bound import (
    ARTIFACTS_KEPT,
    MIN_BOUND,
    CountFn,
    chunk,
    concat,
    fit_draft,
    rollup_items,
)
from domain.compaction.drafts import SummaryDraft, SummaryRequest
from domain.frontier import Plan
from domain.policy.context_policy import ROLLUP_FIT_SHARE
from schemas.summary_body import RollupNote


def rollup_requests(
    draft: SummaryDraft,
    bound: int,
    op_id: str,
    plan: Plan,
    segment_tokens: int,
    count: CountFn,
) -> tuple[tuple[SummaryRequest, ...], int]:
    """The roll-up's requests, and how many entries of ``draft`` they hold."""
    items = rollup_items(draft)
    chunks = chunk(items, segment_tokens, count)
    per_chunk = max(MIN_BOUND, bound // max(1, len(chunks)))
    requests = tuple(
        SummaryRequest(part, None, per_chunk, f"{op_id}:rollup:{k}", plan=plan)
        for k, part in enumerate(chunks)
    )
    return requests, len(items)


def rolled_up(
    draft: SummaryDraft,
    parts: Sequence[SummaryDraft],
    note: RollupNote,
    bound: int,
    parent_id: str | None,
) -> tuple[SummaryDraft, RollupNote]:
    """The roll-up's drafts (``parts``) as one summary, noted; ``draft`` itself when a
    call failed (``note.error``). ``note``: the calls, requests and entries in."""
    # A recorded decision or question is never reworded or lost by a roll-up.
    rolled = keep_recorded(draft, concat(parts)) if note.error is None else draft
    said = (
        f"rolled up summary {parent_id or '-'} and new segments: {note.entries_in} entries"
        f" condensed to fit {bound} tokens; every covered record stays readable by id"
    )
    rolled = dataclasses.replace(
        rolled,
        work_artifact_refs=tuple(draft.work_artifact_refs[-ARTIFACTS_KEPT:]),
        observations=(*rolled.observations[-3:], said),
    )
    return rolled, dataclasses.replace(note, entries_out=len(rolled.all_facts()))


def fitted(
    draft: SummaryDraft, bound: int, count: CountFn, parent_id: str | None
) -> tuple[SummaryDraft, RollupNote]:
    """``draft`` within ``ROLLUP_FIT_SHARE`` of ``bound`` with no summarizer call: the
    deterministic fit (``fit_draft``: notes, refs and the oldest plain facts go first, the
    user's requests and recorded entries last), which leaves the next jobs room for their
    new entries before another roll-up. A billed summarizer's default (``auto``): a
    roll-up call reads the whole summary and writes it again, at output prices."""
    room = max(MIN_BOUND, int(bound * ROLLUP_FIT_SHARE))
    entries = len(draft.all_facts())
    refs = tuple(draft.work_artifact_refs[-ARTIFACTS_KEPT:])
    kept, dropped = fit_draft(dataclasses.replace(draft, work_artifact_refs=refs), room, count)
    said = (
        f"fitted summary {parent_id or '-'} and new segments: {entries - dropped} of"
        f" {entries} entries kept within {room} tokens, the oldest dropped; every covered"
        " record stays readable by id"
    )
    kept = dataclasses.replace(kept, observations=(*kept.observations[-3:], said))
    note = RollupNote(calls=0, entries_in=entries, fitted_out=dropped)
    return kept, dataclasses.replace(note, entries_out=len(kept.all_facts()))
