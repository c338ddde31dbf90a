"""Draft validation before a summary may replace history (R11.4, R11.5). Pure.

A draft that fails here is never committed: the job keeps the old view and records the
stage (R15.3). Each rejection names one machine-readable ``reason``.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

from domain.compaction.drafts import Fact, SummaryDraft
from domain.compaction.errors import InvalidSummary
from domain.frontier import Plan, plan_contradiction, without_constraints

# R11.5: task, constraints and plan come from their own sources. A summary line that
# reads like a directive setting them would, once rendered into context, compete with
# the real plan — so such lines are rejected rather than rewritten.
PLAN_STATE_PREFIXES = ("PLAN:", "TASK:", "SYSTEM:")


def claims_plan_state(text: str) -> bool:
    return text.lstrip().upper().startswith(PLAN_STATE_PREFIXES)


def check_plan(draft: SummaryDraft, plan: Plan) -> None:
    """R11.4: refuse a draft that states a current plan item's status otherwise
    than the plan does (``plan_status_contradicted``): the plan is state of record, the
    summary history, which may report an earlier plan only as a past event."""
    for field, facts in draft.sections():
        for index, fact in enumerate(facts):
            found = plan_contradiction(fact.statement, plan)
            if found is not None:
                item, stated = found
                raise InvalidSummary(
                    f"summary states plan item {item.item_id!r} as {stated}; the current"
                    f" plan (v{plan.version}) has it {item.status}",
                    reason="plan_status_contradicted",
                    field=field,
                    index=index,
                    item_id=item.item_id,
                    stated=stated,
                    current=item.status,
                    plan_version=plan.version,
                )


def past_framed(draft: SummaryDraft, plan: Plan) -> SummaryDraft:
    """The draft with each statement that would contradict the current plan reported as
    the past it is ("earlier: …"): how an extractive summarizer quotes an old account of
    the plan without restating it as current."""
    if not plan.items:
        return draft

    def frame(statement: str) -> str:
        return f"earlier: {statement}" if plan_contradiction(statement, plan) else statement

    return _restated(draft, frame)


def as_history(draft: SummaryDraft, plan: Plan, declared: Sequence[str] = ()) -> SummaryDraft:
    """The draft as history beside the frontier (R11.5): an old account of the plan framed
    as the past (``past_framed``), a declared constraint it repeats replaced by a marker
    (``domain.frontier.without_constraints``: a retired one never comes back this way)."""
    draft = past_framed(draft, plan)
    if not declared:
        return draft
    return _restated(draft, lambda statement: without_constraints(statement, declared))


def _restated(draft: SummaryDraft, restate: Callable[[str], str]) -> SummaryDraft:
    """``draft`` with every entry's statement passed through ``restate``."""

    def each(facts: tuple[Fact, ...]) -> tuple[Fact, ...]:
        return tuple(dataclasses.replace(f, statement=restate(f.statement)) for f in facts)

    return dataclasses.replace(
        draft,
        verified_facts=each(draft.verified_facts),
        decisions=each(draft.decisions),
        failures=each(draft.failures),
        unresolved_questions=each(draft.unresolved_questions),
    )


def validate_draft(
    draft: SummaryDraft,
    allowed_source_ids: frozenset[str],
    max_chars: int,
    *,
    known_source_ids: frozenset[str] = frozenset(),
    plan: Plan | None = None,
) -> None:
    """Raise ``InvalidSummary`` unless ``draft`` may become a summary revision.

    ``allowed_source_ids`` are the segment's record ids. ``known_source_ids`` optionally
    names other records of the thread: citing one of those is ``source_out_of_range``
    (real, but not covered by this summary) rather than ``unknown_source_id``.
    """
    if draft.is_empty():
        raise InvalidSummary(
            "summary has no facts, decisions, failures or questions", reason="empty"
        )
    for field, facts in draft.sections():
        for index, fact in enumerate(facts):
            where = {"field": field, "index": index}
            if not fact.statement.strip():
                raise InvalidSummary("empty statement", reason="empty_statement", **where)
            if not fact.source_ids:
                raise InvalidSummary("statement cites no source", reason="uncited", **where)
            for sid in fact.source_ids:
                if sid in allowed_source_ids:
                    continue
                reason = "source_out_of_range" if sid in known_source_ids else "unknown_source_id"
                raise InvalidSummary(
                    f"statement cites {sid!r} outside the segment",
                    reason=reason,
                    source_id=sid,
                    **where,
                )
            if claims_plan_state(fact.statement):
                raise InvalidSummary(
                    "summary statement sets plan/task state",
                    reason="plan_state_in_summary",
                    **where,
                )
    for index, obs in enumerate(draft.observations):
        if claims_plan_state(obs):
            raise InvalidSummary(
                "summary note sets plan/task state",
                reason="plan_state_in_summary",
                field="observations",
                index=index,
            )
    if plan is not None:
        check_plan(draft, plan)
    length = len(draft.text())
    if length > max_chars:
        raise InvalidSummary(
            "summary text too long", reason="too_long", chars=length, max_chars=max_chars
        )


def coverage(draft: SummaryDraft, segment_ids: Iterable[str]) -> float:
    """Share of the segment's records cited at least once (diagnostics, R18).

    An empty segment is fully covered: there was nothing to cite.
    """
    ids = frozenset(segment_ids)
    if not ids:
        return 1.0
    return len(ids & draft.cited_ids()) / len(ids)


def check_coverage(
    draft: SummaryDraft,
    covered: Mapping[str, int],
    ranges: Sequence[tuple[int, int]],
    *,
    earlier: frozenset[str] = frozenset(),
) -> None:
    """R11.4/R11.7: every record the summary covers is either cited by an entry or
    accounted for by one of its covered ranges, and every cited record is one it covers
    (``covered``: record id → session_sequence, for this job; ``earlier``: records the
    parent chain covers). Raises ``InvalidSummary`` (``source_out_of_range`` or
    ``coverage_gap``)."""
    for field, facts in draft.sections():
        for index, fact in enumerate(facts):
            for sid in fact.source_ids:
                if sid not in covered and sid not in earlier:
                    raise InvalidSummary(
                        f"summary cites {sid!r}, which it does not cover",
                        reason="source_out_of_range",
                        source_id=sid,
                        field=field,
                        index=index,
                    )
    cited = draft.cited_ids()
    spans: list[tuple[int, int]] = []  # merged, so the range before ``seq`` decides
    for lo, hi in sorted(ranges):
        if spans and lo <= spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], max(spans[-1][1], hi))
        else:
            spans.append((lo, hi))
    starts = [lo for lo, _ in spans]
    for rid, seq in covered.items():
        i = bisect.bisect_right(starts, seq) - 1  # the last range starting at or before seq
        if rid in cited or (i >= 0 and seq <= spans[i][1]):
            continue
        raise InvalidSummary(
            f"covered record {rid!r} is neither cited nor in a covered range",
            reason="coverage_gap",
            record_id=rid,
            session_sequence=seq,
        )
