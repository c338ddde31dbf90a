"""Entries of an earlier summary (kind ``summary:<section>``, a roll-up, R11.8) as floor
fragments, so that repeated roll-ups shorten and drop them as the one-shot floor did.
Pure."""

from __future__ import annotations

import re

from domain.compaction.bound import ANSWER_PREFIX, RECORDED_ROLE, USER_PREFIX
from domain.compaction.drafts import RECORDED, SECTION_TITLES, SourceItem
from domain.compaction.extractive.builder import (
    ANSWER_ENTRY,
    CALL,
    ENTRY,
    FIXED,
    PRIOR_ROLLED,
    SIGNAL,
    STATUS,
    T_RECORDED,
    T_SIGNAL,
    T_STUB,
    T_TEXT,
    T_USER,
    USER_ENTRY,
    Builder,
)
from domain.compaction.extractive.segmentation import one_line


def add_entry(b: Builder, item: SourceItem, section: str) -> None:
    """An entry of an earlier summary, as it was written: recorded entries whole and
    first, the user's words whole, the rest in the pieces this summarizer joined
    (``_JOINS``) so that a roll-up drops and shortens them as the floor did — a step's
    calls (after " → ") as calls, its prose as prose, a failure's stub and its last
    line (the exception) the last of it to go."""
    if section not in SECTION_TITLES:
        return
    recorded = item.role == RECORDED_ROLE
    text = one_line(item.text) or "(empty)"
    user = text.startswith(USER_PREFIX)
    line = b.line(section, origin=RECORDED if recorded else "", key=item.question_key)
    # the user's words and an answer keep their prefix whole, as the one-shot floor does:
    # a roll-up shortens the words behind it
    prefix = "" if recorded else next((p for p in _PREFIXES if text.startswith(p)), "")
    part = b.part(line, item.record_id, prefix, rank=item.session_sequence)  # in time order
    words = text[len(prefix) :] or text
    if recorded or user:
        # a recorded entry is restored verbatim after a roll-up: never shortened here
        b.floor(part, words, T_RECORDED if recorded else T_USER, FIXED if recorded else USER_ENTRY)
        return
    if prefix == ANSWER_PREFIX:  # what a run concluded: as firm as the calls
        b.answer(part, words, ANSWER_ENTRY)
        return
    stub = STUB_SHAPE.match(text) if section == "verified_facts" else None
    if stub:  # a result that succeeded with no error line: its stub, what the greedy kept
        b.floor(part, stub.group(1), T_STUB, FIXED)
        if stub.group(2):
            b.extra(part, stub.group(2), PRIOR_ROLLED, sep=": ", layer=2, scale=1.0)
        return
    firm = section != "verified_facts"  # failures, open questions, decisions
    cue = section in ("failures", "unresolved_questions")
    bits = _JOINS.split(text)
    pieces, seps = bits[::2], [" ", *bits[1::2]]
    calls = False
    for k, piece in enumerate(pieces):
        calls = calls or seps[k] == " → " or (k == 0 and CALL_SHAPE.match(piece) is not None)
        if not piece:
            continue
        if not (firm or calls) and k and seps[k] in (" | ", " … "):
            # a result's further lines: as they were, worth their salient things only
            b.extra(part, piece, PRIOR_ROLLED, sep=seps[k], layer=2, scale=1.0)
            continue
        tier = T_SIGNAL if firm or calls else T_TEXT
        ends = k in (0, len(pieces) - 1)  # a failure's stub and its last line
        inner = len(pieces) if ends else k
        cap = CALL if calls else SIGNAL if section == "failures" else ENTRY
        b.floor(part, piece, tier, cap, sep=seps[k], cue=cue and ends, inner=inner)


# A call as ``salience.render_call`` writes it, ``name(values)``: a step whose prose was
# left out starts its line with its calls.
CALL_SHAPE = re.compile(r"^[^\W\d][\w.:-]*\(.*\)$")
# A successful result's stub as ``draft`` writes it, the tool's name and "ok", and the
# lines of its output the greedy kept after ": ".
STUB_SHAPE = re.compile(rf"^(\S+ {re.escape(STATUS['ok'])})(?:$|: (.+))")
_PREFIXES = (USER_PREFIX, ANSWER_PREFIX)
# How this summarizer joins the pieces of a line: a step's prose and its calls, calls,
# a result's lines, a gap.
_JOINS = re.compile(r"( → |; | \| | … )")
