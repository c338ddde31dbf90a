"""Draft validation before a summary may replace history (R11.4). Pure.

A draft that fails here is never committed: the job keeps the old view and records the
stage (R15.3). Each rejection names one machine-readable ``reason``, and every reason is
structural — the draft's shape, its citations, its coverage, its size
(``text_rules.STRUCTURAL_FAILURES``). What an entry's words say is for the text rules
(``domain.compaction.text_rules``), which frame an entry and never refuse a draft.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence

from domain.compaction.drafts import SummaryDraft
from domain.compaction.errors import InvalidSummary
from domain.compaction.text_rules import claims_plan_state

__all__ = ["check_coverage", "claims_plan_state", "coverage", "validate_draft"]


def validate_draft(
    draft: SummaryDraft,
    allowed_source_ids: frozenset[str],
    max_chars: int,
    *,
    known_source_ids: frozenset[str] = frozenset(),
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
