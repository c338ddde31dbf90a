"""What a summarizer is shown and what a new revision covers: the pure parts of a job.

``source_items`` turns a segment's records into the summarizer's input (redacted, an
oversized group clipped by reference, never a system role); ``merge_drafts`` carries the
parent summary forward and ``merge_job`` adds the authored records' entries
(``domain.compaction.authored``); ``merge_ranges`` joins the covered sequence ranges.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from domain.compaction.answers import Said, close_answered
from domain.compaction.authored import AUTHORED_KINDS, with_recorded
from domain.compaction.bound import concat
from domain.compaction.drafts import SourceItem, SummaryDraft
from domain.context.redaction import redact
from domain.context.rendering import RecordView
from domain.context.selection import Group, Segment

OVERSIZED_CHARS = 2_000  # an oversized group's records are shown clipped, by reference

_ROLES = {
    "user_input": "user",
    "supplement": "user",
    "assistant_message": "assistant",
    "tool_outcome": "tool",
}


def source_items(seg: Segment, by_id: Mapping[str, RecordView]) -> tuple[SourceItem, ...]:
    """The segment's records, in order, as the summarizer sees them. A covered group's
    call that never got a result is shown whole: the call, then an ``unknown`` outcome
    citing the call's record (R2.4, R5.1)."""
    out: list[SourceItem] = []
    for g in seg.groups:
        out.extend(_item(by_id[rid], seg.oversized) for rid in g.record_ids)
        if g.open_calls:
            out.extend(_unknown_outcomes(by_id[g.record_ids[0]], g.open_calls))
    return tuple(out)


UNKNOWN_OUTCOME = "no result was recorded for this call: its outcome is unknown"


def _unknown_outcomes(call_record: RecordView, open_calls: Sequence[str]) -> list[SourceItem]:
    p = call_record.payload
    specs = [p] if call_record.kind == "tool_call" else (p.get("tool_calls") or [])
    names = {str(c.get("call_id")): str(c.get("name") or "") for c in specs}
    return [
        SourceItem(
            call_record.record_id,
            call_record.session_sequence,
            "tool_outcome",
            "tool",
            UNKNOWN_OUTCOME,
            tool_name=names.get(cid) or None,
            tool_status="unknown",
            call_id=cid,
        )
        for cid in open_calls
    ]


def _text(r: RecordView, oversized: bool) -> str:
    text, _ = redact(r.text)  # R15.4: no credential reaches the summarizer
    if oversized and len(text) > OVERSIZED_CHARS:
        # R11.2: an oversized group is externalized first — its full content stays in
        # the store, readable by record id; the request sees a clip.
        text = (
            f"{text[:OVERSIZED_CHARS]}… [externalized: full content in record"
            f" {r.record_id}, {len(r.text)} chars]"
        )
    return text


def _arguments(r: RecordView, oversized: bool) -> tuple[tuple[str, str], ...]:
    """The calls' names and arguments: a file that was only read is named there.
    Redacted and clipped like the text (R15.4, R11.2)."""
    p = r.payload
    specs = [p] if r.kind == "tool_call" else (p.get("tool_calls") or [])
    arguments = tuple(
        (str(c.get("name") or ""), redact(str(c.get("arguments_json") or ""))[0])
        for c in specs
        if c.get("name") or c.get("arguments_json")
    )
    if oversized:
        arguments = tuple((n, a[:OVERSIZED_CHARS]) for n, a in arguments)
    return arguments


def _item(r: RecordView, oversized: bool) -> SourceItem:
    p = r.payload
    calls = p.get("tool_calls") or []
    return SourceItem(
        r.record_id,
        r.session_sequence,
        r.kind,
        _ROLES.get(r.kind, "user"),  # R3.3: never system
        _text(r, oversized),
        tool_name=p.get("name"),
        tool_status=p.get("status"),
        call_id=p.get("call_id") or (calls[0]["call_id"] if calls else None),
        arguments=_arguments(r, oversized),
        question_key=str(p.get("question_key") or ""),
        detail=str(p.get("reason") or p.get("answer") or "") if r.kind in AUTHORED_KINDS else "",
    )


def merge_drafts(
    parent: Mapping[str, Any] | None,
    drafts: Sequence[SummaryDraft],
    later: Sequence[Said] = (),
) -> SummaryDraft:
    """The new revision carries the parent's content forward (covered records are not
    summarized again, R11.8) and appends what the new segments add; the bound is applied
    afterwards (roll-up, fit). ``later``: the new segments' user and assistant texts —
    a parent's open question they answer is open no longer (R11.7)."""
    first = [SummaryDraft.from_dict(parent)] if parent else []
    return close_answered(concat(first + list(drafts)), later)


def merge_job(
    parent: Mapping[str, Any] | None,
    drafts: Sequence[SummaryDraft],
    items: Sequence[SourceItem],
    records: Iterable[RecordView],
) -> SummaryDraft:
    """A job's merged draft: the parent carried forward, the segments' drafts appended,
    a parent's question the new segments' conversation answered closed (``merge_drafts``),
    and the decisions and questions recorded by their author as verbatim entries of their
    own, whatever the summarizer wrote (``with_recorded``). ``items``: the source items
    the summarizer was shown; ``records``: the covered records, in order."""
    merged = merge_drafts(parent, drafts, conversation_texts(records))
    return with_recorded(merged, items, parent)


def conversation_texts(records: Iterable[RecordView]) -> list[Said]:
    """What the user and the model said in ``records``, with where and by which kind of
    record: an open question leaves the open list once a user message follows it."""
    kinds = ("user_input", "supplement", "assistant_message")
    return [(r.record_id, r.session_sequence, r.text, r.kind) for r in records if r.kind in kinds]


def merge_ranges(
    covered: Sequence[Group], earlier: Sequence[tuple[int, int]]
) -> tuple[tuple[int, int], ...]:
    """The sequence ranges the new revision covers: the new groups' and the parent's,
    adjacent or overlapping ranges joined."""
    spans = sorted([(g.first_sequence, g.last_sequence) for g in covered] + list(earlier))
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)
