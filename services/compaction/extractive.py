"""Extractive summarizer: deterministic, no model (R11.3 default adapter and test double).

It lifts what a segment already states — questions and their answers, tool results,
failures, decisions, touched paths — into a ``SummaryDraft`` that always cites the
records it came from. One pass over the segment plus one over the lines, so thousands
of records summarize in milliseconds, and the same segment always gives the same draft.

When the rendered text would exceed ~4 characters per output token, the least
important lines go first: notes, successful tool results, decisions, answered
questions, artifact paths; failures and open questions go last, oldest first.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass

from services.compaction.bound import ROLLUP_KIND
from services.compaction.contracts import (
    SECTION_TITLES,
    Fact,
    SourceItem,
    SummaryDraft,
    SummaryRequest,
    SummaryResult,
    one_line,
)
from services.compaction.validate import claims_plan_state

CHARS_PER_TOKEN = 4
STATEMENT_CHARS = 160
MAX_ARTIFACT_REFS = 50
PATH_SCAN_CHARS = 20_000  # a path worth keeping shows up early; bounds work on huge results

USER_KINDS = frozenset({"user_input", "supplement"})
TOOL_KINDS = frozenset({"tool_call", "tool_outcome"})
FAILED = {"error": "failed", "cancelled": "was cancelled", "unknown": "outcome unknown"}
_DECISION = re.compile(r"\b(?:decided|decide to|will|plan to|planning to|going to)\b", re.I)
# Absolute/home/relative paths with 2+ parts, or relative ones with an extension; the
# lookbehind keeps URLs ("https://host/a.html") and ratios ("and/or") out.
_PATH = re.compile(
    r"(?<![\w:/.~-])(?:(?:~|\.{1,2})?/(?:[\w.-]+/)+[\w.-]+"
    r"|(?:[\w-][\w.-]*/)+[\w-][\w-]*\.[A-Za-z0-9]{1,8})(?![\w/.-])"
)

# Drop order under the size cap: lower classes go first (oldest first within a class).
NOTE, TOOL_OK, DECISION, ANSWER, ARTIFACT, KEEP = range(6)
# A roll-up (R11.8) re-summarizes entries of earlier summaries: each keeps its section's
# rank, so failures and open questions outlive plain facts here too.
_ROLLUP_CLASS = {
    "verified_facts": ANSWER,
    "decisions": DECISION,
    "failures": KEEP,
    "unresolved_questions": KEEP,
}
TRUNCATION_NOTE_RESERVE = 80


@dataclass(frozen=True)
class _Line:
    cls: int
    section: str  # a SummaryDraft field name
    fact: Fact | None = None
    text: str = ""

    def rendered_len(self) -> int:
        return len(self.fact.line() if self.fact else f"- {one_line(self.text)}") + 1


def _clip(text: str, limit: int = STATEMENT_CHARS) -> str:
    # Cut before collapsing whitespace so a megabyte tool result costs O(limit), not O(size).
    flat = one_line(text[: limit * 4])
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _fact(statement: str, *ids: str) -> Fact:
    if claims_plan_state(statement):  # quoted history, not a directive (R11.5)
        statement = f"said: {statement}"
    return Fact(statement or "(empty)", tuple(dict.fromkeys(ids)))


def _decision_sentence(text: str) -> str | None:
    m = _DECISION.search(text)
    if m is None:
        return None
    start = max(text.rfind(c, 0, m.start()) for c in ".!?\n") + 1
    ends = [i for i in (text.find(c, m.end()) for c in ".!?\n") if i >= 0]
    return _clip(text[start : (min(ends) + 1 if ends else len(text))])


def _dispatched(segment: tuple[SourceItem, ...]) -> list[bool]:
    """Per item: an assistant message that made tool calls (not a final answer).

    Tool records after an assistant message, up to the next one, belong to it; user
    supplements may sit in between (R5.3), so only assistant messages reset the scan.
    """
    out = [False] * len(segment)
    tools_after = False
    for i in range(len(segment) - 1, -1, -1):
        item = segment[i]
        if item.kind in TOOL_KINDS:
            tools_after = True
        elif item.kind == "assistant_message":
            out[i] = tools_after or item.call_id is not None
            tools_after = False
    return out


def _extract(segment: tuple[SourceItem, ...]) -> tuple[list[_Line], list[str]]:
    lines: list[_Line] = []
    refs: dict[str, None] = {}  # insertion-ordered set
    pending: list[SourceItem] = []
    call_records: dict[str, str] = {}
    dispatched = _dispatched(segment)
    for i, item in enumerate(segment):
        kind = item.kind
        if kind.startswith(ROLLUP_KIND):
            section = kind[len(ROLLUP_KIND) :]
            if section in _ROLLUP_CLASS:
                cls = _ROLLUP_CLASS[section]
                if cls == ANSWER and not item.text.startswith("Q: "):
                    cls = TOOL_OK  # a tool result goes before an answered question
                fact = Fact(_clip(item.text) or "(empty)", (item.record_id,))
                lines.append(_Line(cls, section, fact))
            continue
        if kind in TOOL_KINDS and len(refs) < MAX_ARTIFACT_REFS:
            for path in _PATH.findall(item.text[:PATH_SCAN_CHARS]):
                refs.setdefault(path.rstrip("."), None)
        if kind in USER_KINDS:
            pending.append(item)
        elif kind == "assistant_message":
            if not dispatched[i]:
                for q in pending:
                    qa = f"Q: {_clip(q.text)} → A: {_clip(item.text)}"
                    lines.append(
                        _Line(ANSWER, "verified_facts", _fact(qa, q.record_id, item.record_id))
                    )
                pending.clear()
            decision = _decision_sentence(item.text)
            if decision:
                lines.append(_Line(DECISION, "decisions", _fact(decision, item.record_id)))
        elif kind == "tool_call" and item.call_id:
            call_records.setdefault(item.call_id, item.record_id)
        elif kind == "tool_outcome":
            name, status = item.tool_name or "unnamed", item.tool_status or "unknown"
            if status == "ok":
                fact = _fact(f"tool {name} returned: {_clip(item.text)}", item.record_id)
                lines.append(_Line(TOOL_OK, "verified_facts", fact))
            else:
                ids = [call_records[item.call_id]] if item.call_id in call_records else []
                verb = FAILED.get(status, status)
                fact = _fact(f"tool {name} {verb}: {_clip(item.text)}", *ids, item.record_id)
                lines.append(_Line(KEEP, "failures", fact))
        elif kind == "child_result":
            fact = _fact(f"child result: {_clip(item.text)}", item.record_id)
            lines.append(_Line(TOOL_OK, "verified_facts", fact))
        elif kind == "run_cancelled":
            lines.append(_Line(KEEP, "failures", _fact("run was cancelled", item.record_id)))
    for q in pending:  # never answered within the segment
        lines.append(_Line(KEEP, "unresolved_questions", _fact(_clip(q.text), q.record_id)))
    return lines, list(refs)


def _notes(segment: tuple[SourceItem, ...]) -> str:
    if all(item.kind.startswith(ROLLUP_KIND) for item in segment):
        return f"rolled up {len(segment)} entries of earlier summaries"
    kinds = Counter(item.kind for item in segment)
    counts = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
    lo, hi = segment[0].session_sequence, segment[-1].session_sequence
    return f"{len(segment)} records, sequences {lo}-{hi}: {counts}"


def _fit(lines: list[_Line], cap: int) -> tuple[list[bool], int]:
    """Mark lines to drop, least important and oldest first, until the estimate fits.

    The estimate counts every section header, so it is never below the real length.
    """
    headers = sum(len(t) + 4 for t in (*SECTION_TITLES.values(), "Artifacts", "Notes"))
    total = headers + sum(line.rendered_len() for line in lines)
    dropped = [False] * len(lines)
    if total <= cap:
        return dropped, 0
    budget = cap - TRUNCATION_NOTE_RESERVE
    by_class: list[list[int]] = [[] for _ in range(KEEP + 1)]
    for index, line in enumerate(lines):
        by_class[line.cls].append(index)
    n_facts = sum(1 for line in lines if line.fact is not None)
    n_dropped = 0
    for queue in by_class:
        for index in queue:
            if total <= budget:
                return dropped, n_dropped
            if lines[index].fact is not None and n_facts == 1:
                continue  # an empty draft is worse than a long one
            dropped[index] = True
            n_dropped += 1
            total -= lines[index].rendered_len()
            n_facts -= lines[index].fact is not None
    return dropped, n_dropped


def _draft(lines: list[_Line], dropped: list[bool]) -> SummaryDraft:
    fields: dict[str, list[Fact]] = {name: [] for name in SECTION_TITLES}
    refs: list[str] = []
    notes: list[str] = []
    for line, gone in zip(lines, dropped, strict=True):
        if gone:
            continue
        if line.fact is not None:
            fields[line.section].append(line.fact)
        elif line.section == "work_artifact_refs":
            refs.append(line.text)
        else:
            notes.append(line.text)
    return SummaryDraft(
        verified_facts=tuple(fields["verified_facts"]),
        decisions=tuple(fields["decisions"]),
        failures=tuple(fields["failures"]),
        unresolved_questions=tuple(fields["unresolved_questions"]),
        work_artifact_refs=tuple(refs),
        observations=tuple(notes),
    )


def extract_draft(req: SummaryRequest) -> SummaryDraft:
    """The deterministic draft for ``req``; ``req.previous_summary_text`` is not used —
    the earlier summary stays in the chain (R11.8) and is not restated."""
    segment = req.segment
    lines, refs = _extract(segment)
    if not any(line.fact for line in lines):
        # Nothing to lift (e.g. only lifecycle records): still account for the range.
        first, last = segment[0].record_id, segment[-1].record_id
        statement = f"{len(segment)} records without questions, answers or tool results"
        lines.append(_Line(KEEP, "verified_facts", _fact(statement, first, last)))
    lines += [_Line(ARTIFACT, "work_artifact_refs", text=ref) for ref in refs]
    lines.append(_Line(NOTE, "observations", text=_notes(segment)))
    cap = CHARS_PER_TOKEN * req.max_output_tokens
    dropped, n_dropped = _fit(lines, cap)
    draft = _draft(lines, dropped)
    if n_dropped:
        note = f"omitted {n_dropped} of {len(lines)} lines to fit {cap} characters"
        noted = _draft([*lines, _Line(NOTE, "observations", text=note)], [*dropped, False])
        if len(noted.text()) <= cap:
            draft = noted
    return draft


class ExtractiveSummarizer:
    """``SummaryGateway`` without a model: the embedded default and the test double."""

    name = "extractive"

    async def summarize(self, req: SummaryRequest) -> SummaryResult:
        started = time.perf_counter()
        draft = extract_draft(req)
        return SummaryResult(
            draft=draft,
            model_operation_id=req.model_operation_id,
            input_tokens=0,  # no model ran: the summary call costs nothing (R18)
            output_tokens=0,
            elapsed_ms=(time.perf_counter() - started) * 1000.0,
            adapter=self.name,
        )
