"""Extractive summarizer: deterministic, no model (R11.3 default adapter and test double).

It keeps what a segment already states, spending the output budget where the facts
are. Every record becomes candidate lines of fragments (``fill``):

- each decision ("we decided to use X instead of Y", "let's…", "Decision: …", a user's
  "do X, not Y") and each open question ("which …?", "TODO: find out …", "still unclear
  whether …") on a line of its own section, citing its record, paid from that section's
  guaranteed share of the budget (``SHARES``; R11.4, R11.7);
- the rest of user and assistant text — observation masking as the first layer: each
  question with its answer (``Q: … → A: …``), each tool-calling step with the calls it
  made (a file that was only read is still named); a sentence that names nothing goes last;
- from tool output its salient lines — errors (and the frame just before one),
  numbers with units, identifiers, paths — wherever they sit; lines of a shape repeated
  through an output count as a few; failures are worth a line by themselves;
- a short ranked path list: the files the tool calls touched first, at most ten.

``fill.Fill`` keeps the fragments with the most new worth per character, record ids
included, so a path or an error code is paid for once however often it recurs. Lines
keep their record order and cite the records they quote (R11.4); the same segment always
gives the same draft; 5,000 records take well under a second.

Entries of earlier summaries (kind ``summary:<section>``, a roll-up, R11.8) go through
the same selection: each keeps its section and its citation; decisions (newest first)
and open questions keep their shares, failures weigh the most of the rest.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter

from domain.compaction import salience as sal
from domain.compaction.bound import ROLLUP_KIND
from domain.compaction.drafts import (
    SECTION_TITLES,
    SourceItem,
    SummaryDraft,
    SummaryRequest,
)
from domain.compaction.fill import (
    CHARS_PER_TOKEN,
    Candidates,
    Fill,
    Frag,
    fact,
    path_list,
    render,
)

LAYER1_SHARE = 0.6  # of the budget, at most, for the first layer (``fill.Frag.layer``)
MAX_ARTIFACT_REFS = 10
ARTIFACT_SHARE = 0.08  # of the budget, at most, for the path list
LISTED_CREDIT = 1.0  # a listed path is known already: a line that only names it adds less
NOTES_RESERVE = 60  # characters kept for the note

USER_KINDS = frozenset({"user_input", "supplement"})
FAILED = {"error": "failed", "cancelled": "was cancelled", "unknown": "outcome unknown"}

# Worth of a fragment by where it comes from, before its features and cues.
PRIOR_USER = 1.0
PRIOR_ANSWER = 1.5  # a final answer's sentences: the conclusions of a run
PRIOR_ASSISTANT = 0.4  # a step's sentences and calls
PRIOR_PLAIN = 0.1  # share of the prior left to a sentence without features or cues
PRIOR_OUTPUT_HEAD = 0.25  # a tool result's first line
PRIOR_OUTPUT_TAIL = 0.3  # its last two lines: totals, exit codes, the verdict
PRIOR_BEFORE_ERROR = 0.5  # the line or two before an error: a traceback's frame
BONUS_KEEP = 2.0  # a failure or an unanswered question is worth a line by itself
# Repeated fragments of one part are worth less each time: the budget spreads over records.
DECAY_OUTPUT = 0.75
DECAY_PROSE = 0.9
# A roll-up keeps sections; failures, open questions outlive facts (decisions: ``SHARES``).
_ROLLUP_CLASS = {"verified_facts": 0.5, "decisions": 0.0, "failures": BONUS_KEEP,
                 "unresolved_questions": BONUS_KEEP}  # fmt: skip
_ROLLUP_SPLIT = re.compile(r"( \| | … | → |; )")
_ROLLUP_CUE = {"decisions": sal.is_decision, "unresolved_questions": sal.is_open}
# Guaranteed shares of the budget, kept first (``Fill.reserve``): (section, share, newest
# first): questions in record order, decisions newest first; what is left goes to the rest.
SHARES = (("unresolved_questions", 0.3, False), ("decisions", 0.25, True))
# (cue, line bonus) of a choice's line: what it is worth past its share, as in roll-ups
_CHOICE = {"decisions": (sal.W_DECISION, 1.0), "unresolved_questions": (sal.W_OPEN, BONUS_KEEP)}


class _Builder(Candidates):
    """Fragments of text, as ``fill`` weighs them."""

    def add(
        self,
        part: int,
        text: str,
        base: float,
        *,
        sep: str = " ",
        output: bool = False,
        path_weight: float = sal.W_PATH,
        layer: int = 1,
        scale: float = 1.0,
        share: str | None = None,
    ) -> None:
        code = sal.W_CODE if output else sal.W_IDENT  # a name in prose is a deliberate mention
        found = sal.features(text, path_weight=path_weight, code_weight=code)
        feats = {k: w * scale for k, w in found.items()} if scale != 1.0 else found
        decay = DECAY_OUTPUT if output else DECAY_PROSE
        self.frag(part, Frag(text, part, 0, sep, feats, base, decay, layer, share=share))

    def prose(
        self, part: int, sentences: list[sal.Piece], prior: float, *, cue: float = 0.0,
        share: str | None = None, user: bool = False,
    ) -> None:  # fmt: skip
        for piece in sentences:
            s, text = piece.text, sal.clip(piece.text)
            named = bool(sal.features(text))
            # "I'll read the code first." decides less than "I'll pin urllib3 to 1.26".
            base = (cue if named else cue / 2) + (sal.W_ERROR if sal.is_error(s) else 0.0)
            if user and sal.is_constraint(s):
                base += sal.W_CONSTRAINT
            # A sentence that names nothing and decides nothing ("Let me check how this
            # is wired.") is kept only when there is room to spare.
            plain = not base and not named
            worth = base + prior * (PRIOR_PLAIN if plain else 1.0)
            self.add(part, text, worth, sep=piece.sep, share=share)

    def choice(self, item: SourceItem, piece: sal.Piece, section: str, prefix: str = "") -> None:
        """A decision or an open question: a line of its own in its section, citing its
        record, paid from the section's guaranteed share of the budget (``SHARES``)."""
        cue, bonus = _CHOICE[section]
        part = self.part(self.line(section, "", bonus), item.record_id, prefix)
        self.prose(part, [piece], PRIOR_ASSISTANT, cue=cue, share=section)

    def calls(self, part: int, item: SourceItem, args_only: bool = False) -> None:
        for k, (name, args) in enumerate(_calls(item)):
            call = sal.render_call("" if args_only else name, args)
            sep = "; " if k else " → "  # after the step's words: what it did
            self.add(part, call, PRIOR_ASSISTANT, sep=sep, path_weight=sal.W_PATH_TOUCHED)

    def output(self, part: int, text: str, failure: bool = False) -> None:
        """Salient lines of a tool result. Error lines belong to the first layer; so
        does a failure's first line when it has no error line."""
        ps = [p for p in sal.pieces(text) if not sal.is_noise(p.text)]
        errors = [sal.is_error(p.text) for p in ps]
        shapes = [sal.shape(p.text) for p in ps]
        counts = Counter(shapes)
        for k, p in enumerate(ps):
            # Lines of a shape repeated n times (log lines, rows, hits, code) are worth
            # about sqrt(n) lines together; the line unlike the others keeps its worth.
            scale = 1 / math.sqrt(counts[shapes[k]])
            base = sal.W_ERROR * scale if errors[k] else 0.0
            if not errors[k] and any(errors[k + 1 : k + 3]):
                base += PRIOR_BEFORE_ERROR
            base += PRIOR_OUTPUT_HEAD if k == 0 else PRIOR_OUTPUT_TAIL if k >= len(ps) - 2 else 0.0
            first = errors[k] or (failure and k == 0 and not any(errors))
            self.add(
                part, sal.clip(p.text, 200), base, sep=" | " if p.line_start else " ",
                output=True, path_weight=sal.W_PATH_OUTPUT, layer=1 if first else 2,
                scale=scale,
            )  # fmt: skip


def _sentences(text: str) -> list[sal.Piece]:
    return sal.pieces(text, prose=True, head=8_000, tail=2_000)


def _dispatched(segment: tuple[SourceItem, ...]) -> list[bool]:
    """Per item: an assistant message that made tool calls (not a final answer).

    Tool records after an assistant message, up to the next one, belong to it; user
    supplements may sit in between (R5.3), so only assistant messages reset the scan.
    """
    out = [False] * len(segment)
    tools_after = False
    for i in range(len(segment) - 1, -1, -1):
        item = segment[i]
        if item.kind in ("tool_call", "tool_outcome"):
            tools_after = True
        elif item.kind == "assistant_message":
            out[i] = tools_after or item.call_id is not None or bool(item.arguments)
            tools_after = False
    return out


def _calls(item: SourceItem) -> list[tuple[str, str]]:
    if item.arguments:
        return list(item.arguments)
    if item.kind == "tool_call":  # an item built without ``arguments``: its text is them
        return [(item.tool_name or "call", item.text)]
    return []


def _candidates(segment: tuple[SourceItem, ...]) -> _Builder:
    b = _Builder()
    b.order = {item.record_id: n for n, item in enumerate(segment)}
    dispatched = _dispatched(segment)
    failed = {
        i.call_id
        for i in segment
        if i.kind == "tool_outcome" and (i.tool_status or "unknown") != "ok" and i.call_id
    }
    call_items = {i.call_id: i for i in segment if i.kind == "tool_call" and i.call_id}
    pending: list[SourceItem] = []

    def user(line: int, item: SourceItem, prefix: str = "", answer: str = "") -> None:
        rest = _choices(b, item, _sentences(item.text), "user: ", answer)
        b.prose(b.part(line, item.record_id, prefix), rest, PRIOR_USER, user=True)

    for i, item in enumerate(segment):
        kind = item.kind
        if kind.startswith(ROLLUP_KIND):
            if kind[len(ROLLUP_KIND) :] in _ROLLUP_CLASS:
                _rollup_entry(b, item, kind[len(ROLLUP_KIND) :])
        elif kind in USER_KINDS:
            pending.append(item)
        elif kind == "assistant_message" and dispatched[i]:
            _step(b, item)
        elif kind == "assistant_message":
            for q in pending[:-1]:  # earlier inputs this answer also closes
                user(b.line("verified_facts"), q, "user: ", item.text)
            line = b.line("verified_facts")
            if pending:
                user(line, pending[-1], "Q: ", item.text)
            pending.clear()
            _answer(b, line, item)
        elif kind == "tool_call" and item.call_id not in failed:  # else on the failure
            b.calls(b.part(b.line("verified_facts"), item.record_id, "call: "), item)
        elif kind == "tool_outcome" and (item.tool_status or "unknown") == "ok":
            if item.text.strip():
                name = item.tool_name or "unnamed"
                b.output(b.part(b.line("verified_facts"), item.record_id, f"{name}: "), item.text)
        elif kind == "tool_outcome":
            _failure(b, item, call_items.get(item.call_id or ""))
        elif kind == "child_result":
            b.output(b.part(b.line("verified_facts"), item.record_id, "child result: "), item.text)
        elif kind == "run_cancelled":
            part = b.part(b.line("failures", "", BONUS_KEEP), item.record_id)
            b.add(part, "run was cancelled", 0.0)
    for q in pending:  # never answered within the segment
        user(b.line("unresolved_questions", "", BONUS_KEEP), q)
    return b


def _choices(
    b: _Builder, item: SourceItem, sentences: list[sal.Piece], prefix: str = "",
    answer: str | None = None,
) -> list[sal.Piece]:  # fmt: skip
    """Each decision and open question of a record on a line of its own (``choice``),
    never also on the record's other line; the other sentences, returned, stay there.
    ``answer``: the record is a user's message, answered by that text (``sal.choice``)."""
    heard = sal.features(answer) if answer is not None else None
    rest: list[sal.Piece] = []
    for k, piece in enumerate(sentences):
        section = sal.choice(piece.text, ask=k == 0, heard=heard)
        if section:
            b.choice(item, piece, section, prefix)
        else:
            rest.append(piece)
    return rest


def _step(b: _Builder, item: SourceItem) -> None:
    """A tool-calling step: its decisions and open questions on lines of their own,
    then one line (one record id to pay for) — its other sentences that name something,
    in order, then its calls."""
    rest = _choices(b, item, _sentences(item.text))
    part = b.part(b.line("verified_facts"), item.record_id)
    for s in rest:
        if sal.features(s.text) or sal.is_error(s.text):  # not "Let me check the code."
            b.prose(part, [s], PRIOR_ASSISTANT)
    b.calls(part, item)


def _answer(b: _Builder, line: int, item: SourceItem) -> None:
    """A final answer: its findings on the question's line, each decision and open
    question on a line of its own section."""
    rest = _choices(b, item, _sentences(item.text))
    b.prose(b.part(line, item.record_id, " → A: ", "A: "), rest, PRIOR_ANSWER)


def _failure(b: _Builder, item: SourceItem, call: SourceItem | None) -> None:
    """A failed, cancelled or unknown tool outcome: worth a line by itself, its error
    first; the call's arguments when the call is a record of its own."""
    status = item.tool_status or "unknown"
    head = f"{item.tool_name or 'unnamed'} {FAILED.get(status, status)}"
    line = b.line("failures", head, BONUS_KEEP)
    if call is not None:
        b.calls(b.part(line, call.record_id, " "), call, args_only=True)
    out = b.part(line, item.record_id, ": ")
    b.lines[line].core = out  # the error itself earns the line its place
    b.output(out, item.text, failure=True)
    if not b.parts[out].frags:
        b.add(out, "(no output)", 0.0)


def _rollup_entry(b: _Builder, item: SourceItem, section: str) -> None:
    """An entry of an earlier summary: its fragments (as it joined them) compete again."""
    line = b.line(section, "", _ROLLUP_CLASS[section])
    part = b.part(line, item.record_id, rank=item.session_sequence)  # entries in time order
    bits = _ROLLUP_SPLIT.split(sal.one_line(item.text))
    texts = bits[::2]
    cue = _ROLLUP_CUE.get(section)
    cued = [bool(cue and t and cue(t)) for t in texts]
    for k, text in enumerate(texts):
        if text:
            base = PRIOR_ASSISTANT + (sal.W_ERROR if sal.is_error(text) else 0.0)
            base += sal.W_DECISION if section == "decisions" and cued[k] else 0.0
            # A decision's or a question's own words keep their share: the cued
            # fragments, or the first when none is (an entry worded otherwise).
            share = section if cue and (cued[k] or not (k or any(cued))) else None
            b.add(part, sal.clip(text, 400), base, sep=bits[2 * k - 1] if k else " ", share=share)
    if not b.parts[part].frags:
        b.add(part, "(empty)", 0.0)


def _touched(segment: tuple[SourceItem, ...]) -> list[str]:
    """Paths the tool calls were given, in order: files actually read, run or edited."""
    out: dict[str, None] = {}
    for item in segment:
        for _, args in _calls(item):
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
    b = _candidates(segment)
    touched = _touched(segment)
    listed = touched[:MAX_ARTIFACT_REFS]
    allowance = min(int(cap * ARTIFACT_SHARE), sum(len(p) + 3 for p in listed))
    allowance += 14 if touched else 0  # the section header
    fill = Fill(b, cap - NOTES_RESERVE - allowance)
    for path in path_list(touched, [], allowance, MAX_ARTIFACT_REFS):
        fill.seen[("path", path)] = LISTED_CREDIT
    fill.run(LAYER1_SHARE, SHARES)
    if b.frags and not any(f.kept for f in b.frags):
        # Too small a budget for any whole fragment: the most valuable one, clipped.
        best = max(b.frags, key=lambda f: fill.gain(f))
        best.text, best.kept = sal.clip(best.text, max(16, cap // 3)), True
    left_frags, left_lines = fill.left_out()
    sections = render(b)
    facts = [f for name in SECTION_TITLES for f in sections[name]]
    if not facts:
        # Nothing to lift (e.g. only lifecycle records): still account for the range.
        first, last = segment[0].record_id, segment[-1].record_id
        statement = f"{len(segment)} records without questions, answers or tool results"
        sections["verified_facts"].append(fact(statement, first, last))
        facts = sections["verified_facts"]
    # One note: what was left out (the originals stay readable by record id), or else
    # what the draft covers.
    notes = [_notes(segment)]
    if left_frags:
        notes = [f"omitted {left_frags} of {len(b.frags)} fragments ({left_lines} whole lines)"]
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
    while len(draft.text()) > cap and (draft.observations or draft.work_artifact_refs):
        # the estimate over-counts (ids count double); this only guards odd input.
        if draft.observations:
            draft = dataclasses.replace(draft, observations=draft.observations[:-1])
        else:
            draft = dataclasses.replace(draft, work_artifact_refs=draft.work_artifact_refs[:-1])
    return draft
