"""The fragments a draft is built from (``fill.Candidates``): the floor's tiers and how
each kind of fragment shortens, and the greedy's worth of a tool result's other lines.
Pure."""

from __future__ import annotations

import domain.compaction.extractive.salience as sal
from domain.compaction.drafts import SourceItem
from domain.compaction.extractive.fill import Candidates, Cap, Frag, _rank
from domain.compaction.extractive.floor import ANSWERS, ASKS
from domain.compaction.extractive.reading import ResultLines, Signal, read_result
from domain.compaction.extractive.segmentation import (
    CJK_STOPS,
    echo_grams,
    is_question,
    sentences,
)

# Tiers of the floor (``fill.Frag.tier``): dropped highest first when the bound binds.
# ``T_STUB``: the stub of a result that succeeded and shows no error line ("read ok") —
# its call, on the floor already, says it ran; the stub adds the record to read it by.
T_RECORDED, T_USER, T_SIGNAL, T_TEXT, T_STUB = 0, 1, 2, 3, 4
# How each kind of floor fragment shortens: (weight, least, most) in ``width`` units
# (about a character of English each).
USER = Cap(2.0, 90, 2_400, head=1.0, whole=1.0)  # the ask first: verbatim to its share
CALL = Cap(1.5, 110, 600)  # least: a command's first 70 characters or so
PROSE = Cap(1.0, 60, 800)
ANSWER = Cap(1.5, 160, 1_600)
SIGNAL = Cap(1.0, 120, 300)  # least: an error line's first 80 characters or so
QUESTION = Cap(1.0, 80, 400)
ENTRY = Cap(1.0, 60)
USER_ENTRY = Cap(2.0, 90, head=0.85, whole=1.0)
ANSWER_ENTRY = Cap(1.5, 160)
FIXED = Cap(0.0, 0)  # a stub: never shortened (its text is a few characters)
# A tool result's status as its stub says it.
STATUS = {"ok": "ok", "error": "failed", "cancelled": "was cancelled", "unknown": "outcome unknown"}

DECAY_OUTPUT = 0.75  # repeated fragments of one part are worth less each time
PRIOR_ROLLED = 0.2  # a rolled-up result line beyond its stub


def _gap(before: str) -> str:
    """The space between two sentences as they were written: none after a CJK stop."""
    return "" if before.endswith(tuple(CJK_STOPS)) else " "


def _joined(said: list[str]) -> str:
    return "".join(s if not k else _gap(said[k - 1]) + s for k, s in enumerate(said))


class Builder(Candidates):
    """Floor and greedy fragments, as ``floor`` and ``fill`` keep them."""

    def floor(
        self,
        part: int,
        text: str,
        tier: int,
        cap: Cap,
        *,
        sep: str = " ",
        cue: bool = False,
        inner: int = 0,
        group: str = "",
    ) -> None:
        feats = sal.features(text[:4_000])
        frag = Frag(text, part, 0, sep, feats, 0.0, 1.0, tier=tier, cap=cap, cue=cue, inner=inner)
        frag.group = group
        self.frag(part, frag)

    def answer(self, part: int, words: str, cap: Cap, asks_cap: Cap = QUESTION) -> None:
        """What a run concluded, as firm as the calls (``T_SIGNAL``), in pieces: its
        questions (by their punctuation) in the ``ASKS`` group, the sentences between them
        in ``ANSWERS`` — so an older answer that the bound shortens keeps what it asked
        (it may still be open) after the rest of it went."""
        runs: list[tuple[bool, list[str]]] = [(is_question(s), [s]) for s in sentences(words)]
        before = ""
        for asks, said in runs:
            text = _joined(said)
            if asks:
                self.floor(part, text, T_SIGNAL, asks_cap, sep=_gap(before), group=ASKS)
            else:
                cue = sal.is_decision(text)
                self.floor(part, text, T_SIGNAL, cap, sep=_gap(before), cue=cue, group=ANSWERS)
            before = text

    def settle_asks(self) -> None:
        """The questions a later user message takes up (``echo_grams``: it repeats a run
        of their words) leave the asks share to those nobody took up, which may still be
        open. It only orders: nothing is presented as answered."""
        later: set[str] = set()  # the echo runs of every user message after this part
        ranked = sorted(self.parts, key=lambda p: _rank(p, self.order), reverse=True)
        for part in ranked:
            frags = [self.frags[i] for i in part.frags]
            for f in frags:
                if f.group == ASKS and later & echo_grams(f.text):
                    f.group = ANSWERS
            for f in frags:
                if f.tier == T_USER:
                    later |= echo_grams(f.full or f.text)

    def extra(
        self, part: int, text: str, base: float, *, sep: str, layer: int, scale: float
    ) -> None:
        found = sal.features(text, path_weight=sal.W_PATH_OUTPUT, code_weight=sal.W_CODE)
        feats = {k: w * scale for k, w in found.items()} if scale != 1.0 else found
        self.frag(part, Frag(text, part, 0, sep, feats, base, DECAY_OUTPUT, layer))

    def calls(self, part: int, item: SourceItem, troubled: bool = False) -> None:
        """The calls ``item`` made; ``troubled``: one of them failed or met an error."""
        for k, (name, args) in enumerate(calls_of(item)):
            call = sal.render_call(name, args)
            self.floor(part, call, T_SIGNAL, CALL, sep="; " if k else " → ", cue=troubled)

    def output(self, part: int, read: ResultLines) -> None:
        """A tool result's lines as ``reading`` read them: those with an error signal
        on the floor, the others for the greedy (the inert ones counted only)."""
        for use in read.uses:
            if use is None:
                self.skip(part)
            elif isinstance(use, Signal):
                cue = use.last
                self.floor(part, use.text, T_SIGNAL, SIGNAL, sep=use.sep, cue=cue, inner=use.inner)
            else:
                worth = use.base
                frag = Frag(use.text, part, 0, use.sep, use.feats, worth, DECAY_OUTPUT, use.layer)
                self.frag(part, frag)


def calls_of(item: SourceItem) -> list[tuple[str, str]]:
    if item.arguments:
        return list(item.arguments)
    if item.kind == "tool_call":  # an item built without ``arguments``: its text is them
        return [(item.tool_name or "call", item.text)]
    return []


def result_lines(item: SourceItem) -> ResultLines:
    """A result read (``reading.read_result``): its lines, its signal lines, their uses."""
    return read_result(item.text, (item.tool_status or "unknown") != "ok")
