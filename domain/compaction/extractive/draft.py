"""Extractive summarizer: deterministic, no model (R11.3 default adapter and test double).

First a *structural floor* (``floor``), before any heuristic: what observation masking
keeps, compressed to the bound —

- every user message's words, verbatim up to a per-message cap (the newest last to go
  when the bound binds);
- each assistant message's prose and its tool calls (name and argument values; a long
  call shortened from the middle, so the program and its target stay);
- each tool result as a cited stub — the tool, its status, the record id to read it back
  by (R10.3) — with the lines that carry an error signal by their shape (``signals``:
  tracebacks, exception lines, test runners' failures, exit codes) and, for a failed
  call, its first line; a failed result, or one with such lines, goes to Failures;
- the author's explicit records (``decision_recorded``, ``question_opened``, entries of
  an earlier summary marked ``origin == "recorded"``): their own sections, dropped last;
- the questions (``?``, full-width or not) of the segment's last assistant message when no user
  message follows it: open. Earlier ones were answered, or the user moved on.

What the floor leaves of the bound goes to the rest of each tool result (``fill.Fill``:
the fragments with the most new salient things per character, paths, numbers, ids), and
what that leaves is topped up: a summary uses the bound it is given. Cues (decision
wording; an error's shape in a tool output's line) only *order*: a fragment they rank up
goes later when the floor must drop some, and weighs more in the greedy; no kind gets a
share from them.

Lines keep their record order and cite only the records of the request (R11.4); the same
segment always gives the same draft; 5,000 records take well under a second.

Entries of earlier summaries (kind ``summary:<section>``, a roll-up, R11.8) are floor
lines of their own section, in the pieces they were joined from (``entries``); shortened,
never reworded.
"""

from __future__ import annotations

import dataclasses

import domain.compaction.extractive.salience as sal
from domain.compaction.bound import ANSWER_PREFIX, ROLLUP_KIND, USER_PREFIX
from domain.compaction.drafts import (
    RECORDED,
    SECTION_TITLES,
    SourceItem,
    SummaryDraft,
    SummaryRequest,
)
from domain.compaction.extractive.builder import (
    ANSWER,
    FIXED,
    PROSE,
    QUESTION,
    STATUS,
    T_RECORDED,
    T_SIGNAL,
    T_STUB,
    T_TEXT,
    T_USER,
    USER,
    Builder,
    calls_of,
    result_lines,
)
from domain.compaction.extractive.entries import add_entry
from domain.compaction.extractive.fill import Fill, fact, path_list, render
from domain.compaction.extractive.floor import keep_floor
from domain.compaction.extractive.reading import ResultLines
from domain.compaction.extractive.segmentation import (
    CHARS_PER_TOKEN,
    is_question,
    one_line,
    sentences,
    shorten,
    width,
    width_joined,
)

MAX_ARTIFACT_REFS = 10
ARTIFACT_SHARE = 0.08  # of the budget, at most, for the path list
LISTED_CREDIT = 1.0  # a listed path is known already: a line that only names it adds less
NOTES_RESERVE = 60  # characters kept for the note
# A roll-up (R11.8) fills this share of its bound by the estimate (``width`` is within a
# few percent of a tokenizer's count, either way): a roll-up over its bound loses its
# oldest whole entry to the job's fit (``bound.fit_draft``), and a session rolls up at
# every job once at its bound — the losses would add up, the oldest calls first.
ROLLUP_HEADROOM = 0.95
# A roll-up shortens entries no lower than this level (``floor``: the user's words to
# 120 units, where the one-shot floor allows 90; calls and answers stop at their own
# least) and drops whole ones, the oldest and lowest tier first, instead: an entry cut
# at one roll-up stays cut at every later one, where the one-shot floor cuts once, at
# the level the whole history allows.
ROLLUP_LEVEL = 60.0

USER_KINDS = frozenset({"user_input", "supplement"})


def _troubled(segment: tuple[SourceItem, ...], results: dict[int, ResultLines]) -> set[int]:
    """Assistant messages (by index) whose calls' results failed or show error lines:
    results after a message, up to the next one, answer its calls."""
    out: set[int] = set()
    trouble = False
    for i in range(len(segment) - 1, -1, -1):
        item = segment[i]
        if item.kind == "tool_outcome":
            trouble = trouble or (item.tool_status or "unknown") != "ok" or results[i].signals
        elif item.kind == "assistant_message":
            if trouble:
                out.add(i)
            trouble = False
    return out


def _steps(segment: tuple[SourceItem, ...]) -> set[int]:
    """Assistant messages (by index) that made tool calls: their own, or tool records
    after them up to the next assistant message (user supplements may sit between)."""
    out: set[int] = set()
    tools_after = False
    for i in range(len(segment) - 1, -1, -1):
        item = segment[i]
        if item.kind in ("tool_call", "tool_outcome"):
            tools_after = True
        elif item.kind == "assistant_message":
            if tools_after or item.call_id is not None or item.arguments:
                out.add(i)
            tools_after = False
    return out


def _asks_last(segment: tuple[SourceItem, ...]) -> int:
    """The index of the segment's last assistant message when no user message comes
    after it (its questions are still open), else -1."""
    for i in range(len(segment) - 1, -1, -1):
        kind = segment[i].kind
        if kind in USER_KINDS:
            return -1
        if kind == "assistant_message":
            return i
    return -1


def _candidates(segment: tuple[SourceItem, ...]) -> Builder:
    b = Builder()
    b.order = {item.record_id: n for n, item in enumerate(segment)}
    failed = {
        i.call_id
        for i in segment
        if i.kind == "tool_outcome" and (i.tool_status or "unknown") != "ok" and i.call_id
    }
    call_items = {i.call_id: i for i in segment if i.kind == "tool_call" and i.call_id}
    asks = _asks_last(segment)
    results = {
        i: result_lines(item)
        for i, item in enumerate(segment)
        if item.kind in ("tool_outcome", "child_result")
    }
    troubled = _troubled(segment, results)
    steps = _steps(segment)
    for i, item in enumerate(segment):
        kind = item.kind
        if kind.startswith(ROLLUP_KIND):
            add_entry(b, item, kind[len(ROLLUP_KIND) :])
        elif kind in USER_KINDS:
            part = b.part(b.line("verified_facts"), item.record_id, USER_PREFIX)
            b.floor(part, one_line(item.text) or "(empty)", T_USER, USER)
        elif kind == "assistant_message":
            step = i in steps
            _assistant(b, item, open_questions=i == asks, troubled=i in troubled, step=step)
        elif kind == "tool_call" and item.call_id not in failed:  # else on the failure
            b.calls(b.part(b.line("verified_facts"), item.record_id), item)
        elif kind == "tool_outcome":
            _outcome(b, item, results[i], call_items.get(item.call_id or ""))
        elif kind == "child_result":
            named = dataclasses.replace(item, tool_name="child result")
            _outcome(b, named, results[i], None)
        elif kind == "run_cancelled":
            part = b.part(b.line("failures"), item.record_id)
            b.floor(part, "run was cancelled", T_SIGNAL, FIXED)
        elif kind in _RECORDS:  # the worker puts the author's own entry in its place
            text = f"{item.text} (reason: {item.detail})" if item.detail else item.text
            line = b.line(_RECORDS[kind], origin=RECORDED, key=item.question_key)
            b.floor(b.part(line, item.record_id), one_line(text), T_RECORDED, FIXED)
    b.settle_asks()
    return b


# The author's explicit records, by kind: their section (a closing moves its question,
# ``domain.compaction.authored``, and makes no entry of its own).
_RECORDS = {"decision_recorded": "decisions", "question_opened": "unresolved_questions"}


def _assistant(
    b: Builder, item: SourceItem, open_questions: bool, troubled: bool, step: bool
) -> None:
    """Its prose and its calls on one line; with ``open_questions`` (the last message,
    no user message after it) each question on a line of its own, open. ``troubled``:
    a call of it failed or met an error, which ranks its calls up. A message that made
    no call (not a ``step``) is an answer — what a run concluded: marked
    ``ANSWER_PREFIX`` and as firm as the calls, where a step's narration goes first."""
    text = item.text
    asked: list[str] = []
    if open_questions:
        said: list[str] = []
        for ln in text.splitlines():
            for s in sentences(ln.strip()):
                (asked if is_question(s) else said).append(s)
        text = " ".join(said)
    part = b.part(b.line("verified_facts"), item.record_id, "" if step else ANSWER_PREFIX)
    prose = one_line(text)
    if prose and step:
        b.floor(part, prose, T_TEXT, PROSE, cue=sal.is_decision(prose))
    elif prose:
        b.answer(part, prose, ANSWER)
    b.calls(part, item, troubled)
    for q in asked:
        b.floor(b.part(b.line("unresolved_questions"), item.record_id), q, T_SIGNAL, QUESTION)


def _outcome(b: Builder, item: SourceItem, read: ResultLines, call: SourceItem | None) -> None:
    """A tool result: a cited stub (tool, status; the record id reads it back, R10.3)
    and its lines (``Builder.output``). Failures, or results with error lines, go to
    Failures, with the call's arguments when the call is a record of its own."""
    status = item.tool_status or "unknown"
    failed = status != "ok"
    line = b.line("failures")
    name = item.tool_name or "unnamed"
    part = b.part(line, item.record_id, f" {name} ", f"{name} ")
    trouble = failed or read.signals
    tier = T_SIGNAL if trouble else T_STUB
    b.floor(part, STATUS.get(status, status), tier, FIXED, cue=trouble, inner=read.lines + 1)
    b.output(part, read)
    if call is not None and failed:
        b.calls(b.part(line, call.record_id, " | call: "), call, troubled=True)
    if not trouble:
        b.lines[line].section = "verified_facts"


def _touched(segment: tuple[SourceItem, ...]) -> list[str]:
    """Paths the tool calls were given, in order: files actually read, run or edited."""
    out: dict[str, None] = {}
    for item in segment:
        for _, args in calls_of(item):
            for path in sal.call_paths(args):
                out.setdefault(path, None)
    return list(out)


def _notes(segment: tuple[SourceItem, ...]) -> str:
    if all(item.kind.startswith(ROLLUP_KIND) for item in segment):
        return f"rolled up {len(segment)} entries of earlier summaries"
    lo, hi = segment[0].session_sequence, segment[-1].session_sequence
    return f"{len(segment)} records, sequences {lo}-{hi}"


def extract_draft(req: SummaryRequest) -> SummaryDraft:
    """The deterministic draft for ``req``; ``req.previous_summary_text`` is not used —
    the earlier summary stays in the chain (R11.8) and is not restated."""
    segment = req.segment
    cap = int(CHARS_PER_TOKEN * req.max_output_tokens)
    rollup = all(item.kind.startswith(ROLLUP_KIND) for item in segment)
    if rollup:
        cap = int(cap * ROLLUP_HEADROOM)
    b = _candidates(segment)
    touched = _touched(segment)
    listed = touched[:MAX_ARTIFACT_REFS]
    allowance = min(int(cap * ARTIFACT_SHARE), sum(width(p) + 3 for p in listed))
    allowance += 14 if touched else 0  # the section header
    fill = Fill(b, cap - NOTES_RESERVE - allowance)
    for path in path_list(touched, [], allowance, MAX_ARTIFACT_REFS):
        fill.seen[("path", path)] = LISTED_CREDIT
    keep_floor(fill, ROLLUP_LEVEL if rollup else 0.0)
    fill.run()
    if b.frags and not any(f.kept for f in b.frags):
        # Too small a budget for any whole fragment: the newest floor one, shortened.
        best = max(b.frags, key=lambda f: (f.tier is not None, -(f.tier or 0), f.part))
        best.text, best.kept = shorten(best.full or best.text, max(16, cap // 3)), True
    shortened = sum(1 for f in b.frags if f.kept and f.full and f.text != f.full)
    left = sum(1 for f in b.frags if not f.kept) + b.inert
    sections = render(b)
    facts = [f for name in SECTION_TITLES for f in sections[name]]
    if not facts:
        # Nothing to lift (e.g. only lifecycle records): still account for the range.
        first, last = segment[0].record_id, segment[-1].record_id
        statement = f"{len(segment)} records without messages or tool results"
        sections["verified_facts"].append(fact(statement, first, last))
        facts = sections["verified_facts"]
    # One note: what was left out or shortened (the originals stay readable by record
    # id), or else what the draft covers.
    notes = [_notes(segment)]
    if left or shortened:
        notes = [f"omitted {left} of {len(b.frags) + b.inert} fragments, shortened {shortened}"]
    draft = SummaryDraft(
        verified_facts=tuple(sections["verified_facts"]),
        decisions=tuple(sections["decisions"]),
        failures=tuple(sections["failures"]),
        unresolved_questions=tuple(sections["unresolved_questions"]),
        work_artifact_refs=tuple(
            path_list(touched, facts, max(0, fill.budget) + allowance, MAX_ARTIFACT_REFS)
        ),
        observations=tuple(notes),
    )
    while width_joined(draft.lines()) > cap and (draft.observations or draft.work_artifact_refs):
        # the estimate over-counts (ids count double); this only guards odd input.
        if draft.observations:
            draft = dataclasses.replace(draft, observations=draft.observations[:-1])
        else:
            draft = dataclasses.replace(draft, work_artifact_refs=draft.work_artifact_refs[:-1])
    return draft
