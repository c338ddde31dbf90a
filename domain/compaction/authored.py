"""Authored records in a summary (R11.7): decisions and open questions recorded
explicitly (``decision_recorded``, ``question_opened``, ``question_closed``) become entries
of their own — verbatim, citing their record, marked ``origin="recorded"`` — whatever
summarizer runs. Pure.

A summarizer may restate these records too; its restatement is dropped for the recorded
entry (one entry per record, in the author's words). Recorded entries stand first in their
section. A question leaves ``unresolved_questions`` only when a ``question_closed`` names
its key — never because of what some text says: it then moves to ``verified_facts`` as
answered, with the answer if there is one, citing the question and its closing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from domain.compaction.drafts import FACT_FIELDS, RECORDED, Fact, SourceItem, SummaryDraft

DECISION_RECORDED = "decision_recorded"
QUESTION_OPENED = "question_opened"
QUESTION_CLOSED = "question_closed"
AUTHORED_KINDS = frozenset({DECISION_RECORDED, QUESTION_OPENED, QUESTION_CLOSED})

_EMPTY = SummaryDraft((), (), (), (), (), ())


def authored_entries(items: Iterable[SourceItem]) -> SummaryDraft:
    """The draft entries of a segment's authored records, in order: a decision (with its
    reason) into ``decisions``, an opened question into ``unresolved_questions``, each
    citing its record. Closings make no entry here (``close_questions`` applies them)."""
    decisions: list[Fact] = []
    questions: list[Fact] = []
    for item in items:
        if item.kind == DECISION_RECORDED:
            text = f"{item.text} (reason: {item.detail})" if item.detail else item.text
            decisions.append(Fact(text, (item.record_id,), RECORDED))
        elif item.kind == QUESTION_OPENED:
            questions.append(Fact(item.text, (item.record_id,), RECORDED, item.question_key))
    return dataclasses.replace(
        _EMPTY, decisions=tuple(decisions), unresolved_questions=tuple(questions)
    )


def close_questions(draft: SummaryDraft, closings: Iterable[SourceItem]) -> SummaryDraft:
    """``draft`` with every recorded question a closing names moved out of
    ``unresolved_questions`` into ``verified_facts`` as answered (the answer appended when
    given), citing the question and the closing. A closing of a question the draft does
    not hold changes nothing (it is still in view, or was never opened)."""
    closed = {c.question_key: c for c in closings if c.kind == QUESTION_CLOSED and c.question_key}
    if not closed:
        return draft
    still_open: list[Fact] = []
    answered: list[Fact] = []
    for f in draft.unresolved_questions:
        closing = closed.get(f.key) if f.recorded and f.key else None
        if closing is None:
            still_open.append(f)
            continue
        note = f"answered: {closing.detail}" if closing.detail else "closed"
        ids = tuple(dict.fromkeys((*f.source_ids, closing.record_id)))
        answered.append(Fact(f"{f.statement} — {note}", ids, RECORDED, f.key))
    if not answered:
        return draft
    return dataclasses.replace(
        draft,
        verified_facts=_recorded_first(draft.verified_facts + tuple(answered)),
        unresolved_questions=tuple(still_open),
    )


def with_recorded(
    merged: SummaryDraft,
    items: Sequence[SourceItem],
    parent: Mapping[str, Any] | SummaryDraft | None = None,
) -> SummaryDraft:
    """The merged draft of a job with the authored records' entries: the parent summary's
    recorded entries (as stored) and those of this job's ``items`` (every segment's
    source items), first in their sections; the summarizers' own entries that only
    restate authored records dropped; then the closings among ``items`` applied.

    Whatever a summarizer or an answer rule did to a recorded entry of the parent is
    undone: recorded entries come from the parent as stored, not from ``merged``."""
    earlier = _as_draft(parent)
    new = authored_entries(items)
    authored_ids = {i.record_id for i in items if i.kind in AUTHORED_KINDS}
    authored_ids |= {sid for f in earlier.all_facts() if f.recorded for sid in f.source_ids}
    sections: dict[str, tuple[Fact, ...]] = {}
    for name in FACT_FIELDS:
        kept = tuple(f for f in getattr(earlier, name) if f.recorded)
        kept += getattr(new, name)
        rest = tuple(f for f in getattr(merged, name) if not _restates(f, authored_ids))
        sections[name] = kept + rest
    return close_questions(_with(merged, sections), items)


def keep_recorded(before: SummaryDraft, after: SummaryDraft) -> SummaryDraft:
    """``after`` (a roll-up's or a hook's rewrite of ``before``) with ``before``'s recorded
    entries restored verbatim, first in their sections; ``after``'s own versions of them
    (an entry marked recorded, or one citing only recorded records) are dropped."""
    recorded_ids = {sid for f in before.all_facts() if f.recorded for sid in f.source_ids}
    if not recorded_ids:
        return after
    sections: dict[str, tuple[Fact, ...]] = {}
    for name in FACT_FIELDS:
        kept = tuple(f for f in getattr(before, name) if f.recorded)
        rest = tuple(f for f in getattr(after, name) if not _restates(f, recorded_ids))
        sections[name] = kept + rest
    return _with(after, sections)


def recorded_questions(draft: SummaryDraft) -> tuple[Fact, ...]:
    """The recorded questions still open in ``draft``."""
    return tuple(f for f in draft.unresolved_questions if f.recorded)


def _restates(f: Fact, authored_ids: set[str]) -> bool:
    """A recorded entry, or a summarizer's entry citing nothing but authored records."""
    return f.recorded or (bool(f.source_ids) and set(f.source_ids) <= authored_ids)


def _with(draft: SummaryDraft, sections: Mapping[str, tuple[Fact, ...]]) -> SummaryDraft:
    return SummaryDraft(
        sections["verified_facts"],
        sections["decisions"],
        sections["failures"],
        sections["unresolved_questions"],
        draft.work_artifact_refs,
        draft.observations,
    )


def _recorded_first(facts: tuple[Fact, ...]) -> tuple[Fact, ...]:
    return tuple(f for f in facts if f.recorded) + tuple(f for f in facts if not f.recorded)


def _as_draft(parent: Mapping[str, Any] | SummaryDraft | None) -> SummaryDraft:
    if parent is None:
        return _EMPTY
    if isinstance(parent, SummaryDraft):
        return parent
    return SummaryDraft.from_dict(parent)
