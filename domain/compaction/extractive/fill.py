"""Filling a summary's output budget: the structural floor first, then the most
valuable fragments. Pure.

A draft is made of *lines* (one statement each, citing its records); a line has *parts*
(one per source record) and a part has *fragments* (a message's words, a tool call, a
line of tool output). Fragments of the *floor* (``Frag.tier`` set: what observation
masking would keep, ``floor``) are kept first, shortened as far as the bound needs. The
rest is a budgeted coverage problem: a fragment is worth its own prior plus the salient
things (``salience.features``) no kept fragment has yet, and costs its width
(``segmentation.width``) plus, for the first fragment of a part, the record id it makes
the line cite and the line's frame. ``Fill`` is the lazy greedy for it: over and over it
keeps the fragment with the most new worth per character; what is left of the bound is
then topped up, so a summary uses the bound it was given.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from domain.compaction.drafts import SECTION_TITLES, Fact
from domain.compaction.extractive.feature_patterns import PATH
from domain.compaction.extractive.salience import Feature
from domain.compaction.extractive.segmentation import CHARS_PER_TOKEN, width
from domain.compaction.validate import claims_plan_state

# The output cap is in tokens; costs are in ``segmentation.width`` units (about a
# character of code each: ``CHARS_PER_TOKEN`` per token).
# Tool output worth less than this is never kept, budget or not ("[64%]", "collected 243
# items"); a result's first line is exempt, as the trace that the call happened.
MIN_GAIN = 0.5


@dataclass
class Frag:
    text: str
    part: int
    index: int  # order within its part
    sep: str  # rendered before it when it directly follows the previous kept fragment
    feats: Mapping[Feature, float]
    base: float  # worth of its own: prior and cues
    decay: float  # its worth is multiplied by this per fragment of its part kept before
    # 1: a tool result's first line (kept even when worth little); 2: other output; 3:
    # lines of a shape repeated through their output (never kept to fill up the bound)
    layer: int = 1
    # The floor (``floor.keep_floor``): its tier (0 recorded entries, 1 the user's words,
    # 2 calls and errors, 3 prose and result stubs: dropped highest tier first when even
    # shortened the floor does not fit), how it may be shortened (``Cap``) and whether it
    # ranks above its tier's others (``cue``: a failed call's lines by structure, or
    # decision wording, a heuristic; either only orders).
    tier: int | None = None
    cap: Cap | None = None
    cue: bool = False
    inner: int = 0  # within its record, the higher the later it goes (a result's stub)
    group: str = ""  # its share of the floor (``floor.SHARES``) when not its tier's
    full: str = ""  # its whole text, before the floor shortened it
    kept: bool = False


@dataclass(frozen=True)
class Cap:
    """How a floor fragment shortens (``segmentation.shorten``): to ``weight`` times the
    floor's level, never below ``least`` nor above ``most`` (0: its whole text), cut
    from the middle so that ``head`` of what is kept is its beginning."""

    weight: float
    least: int
    most: int = 0
    head: float = 0.7  # of a shortened text, the share its head keeps (the rest its tail)
    # a text at most this much over its share stays whole: a cut from the middle would
    # save a few tokens and take its middle — often what it was about
    whole: float = 1.25


@dataclass
class Part:
    line: int
    source_id: str
    prefix: str  # rendered before its fragments when another part precedes it
    first_prefix: str  # … when it is the line's first rendered part
    suffix: str = ""
    frags: list[int] = field(default_factory=list)
    kept: int = 0
    rank: int | None = None  # its place in time when not its record's (a rolled-up entry)
    skipped: int = 0  # its inert fragments so far (``Candidates.skip``): not built


@dataclass
class Line:
    section: str
    head: str
    bonus: float  # worth of having the line at all (a failure, an open question)
    parts: list[int] = field(default_factory=list)
    opened: bool = False
    core: int = -1  # the part whose first fragment earns the bonus (-1: any)
    origin: str = ""  # "recorded": the author's own record (``Fact.origin``)
    key: str = ""  # a recorded question's key (``Fact.key``)


class Candidates:
    """Candidate lines, parts and fragments of one request, in record order."""

    def __init__(self) -> None:
        self.lines: list[Line] = []
        self.parts: list[Part] = []
        self.frags: list[Frag] = []
        self.order: dict[str, int] = {}  # record id -> its place in the request
        self.inert = 0  # fragments skipped (``skip``): counted, never built

    def line(
        self, section: str, head: str = "", bonus: float = 0.0, origin: str = "", key: str = ""
    ) -> int:
        self.lines.append(Line(section, head, bonus, origin=origin, key=key))
        return len(self.lines) - 1

    def part(
        self,
        line: int,
        source_id: str,
        prefix: str = "",
        first: str | None = None,
        rank: int | None = None,
    ) -> int:
        self.parts.append(
            Part(line, source_id, prefix, prefix if first is None else first, rank=rank)
        )
        self.lines[line].parts.append(len(self.parts) - 1)
        return len(self.parts) - 1

    def frag(self, part: int, frag: Frag) -> None:
        p = self.parts[part]
        frag.part, frag.index = part, len(p.frags) + p.skipped
        self.frags.append(frag)
        p.frags.append(len(self.frags) - 1)

    def skip(self, part: int) -> None:
        """A fragment of ``part`` that nothing would keep, counted but not built: tool
        output of a repeated shape (``layer`` 3: never a top-up) worth less than
        ``MIN_GAIN`` at most (its prior plus all its features, before any decay), so the
        greedy finds it never eligible either. It still takes its place in the part
        (``Frag.index``: what is adjacent) and counts among the fragments left out."""
        self.parts[part].skipped += 1
        self.inert += 1


def id_cost(source_id: str) -> int:
    """A citation's cost: the id, its brackets or separator."""
    return width(source_id) + math.ceil(CHARS_PER_TOKEN)


class Fill:
    """The lazy greedy over ``Candidates`` within ``budget`` characters."""

    def __init__(self, c: Candidates, budget: int) -> None:
        self.c = c
        self.budget = budget
        self.seen: dict[Feature, float] = {}  # what kept fragments already say
        self.texts: set[str] = set()
        self.sections: set[str] = set()
        self.line_ids: dict[int, set[str]] = {}  # the records each opened line cites

    def cost(self, f: Frag) -> int:
        part = self.c.parts[f.part]
        line = self.c.lines[part.line]
        c = width(f.text) + (len(f.sep) if part.kept else 0)
        if not part.kept:
            c += max(len(part.prefix), len(part.first_prefix)) + len(part.suffix)
            if part.source_id not in self.line_ids.get(part.line, ()):
                c += id_cost(part.source_id)
        if not line.opened:
            c += len(line.head) + 6  # "- ", " []" and the newline
            if line.section not in self.sections:
                c += len(SECTION_TITLES.get(line.section, line.section)) + 4
        return c

    def gain(self, f: Frag) -> float:
        if f.text in self.texts:  # said already, word for word
            return 0.0
        part = self.c.parts[f.part]
        line = self.c.lines[part.line]
        seen = self.seen
        new = sum(w - seen.get(k, 0.0) for k, w in f.feats.items() if w > seen.get(k, 0.0))
        value = (f.base + new) * f.decay**part.kept
        if line.bonus and not part.kept and f.layer == 1 and line.core in (-1, f.part):
            value += line.bonus  # for what the line is about: the error, the question
        return value

    def eligible(self, f: Frag, gain: float) -> bool:
        return gain > 0 and not (f.layer >= 2 and f.index and gain < MIN_GAIN)

    def keep(self, f: Frag) -> None:
        part = self.c.parts[f.part]
        line = self.c.lines[part.line]
        self.budget -= self.cost(f)
        f.kept = True
        self.texts.add(f.text)
        part.kept += 1
        self.line_ids.setdefault(part.line, set()).add(part.source_id)
        line.opened = True
        self.sections.add(line.section)
        for k, w in f.feats.items():
            self.seen[k] = max(self.seen.get(k, 0.0), w)

    def run(self) -> None:
        """The greedy over what the floor left, then the top-up."""
        self._greedy(3)
        self.top_up()

    def top_up(self) -> None:
        """What is left of the bound, filled: fragments not kept yet that say anything
        not said word for word, by worth per character (below ``MIN_GAIN`` too)."""
        left = [f for f in self.c.frags if f.layer < 3 and not f.kept and f.text not in self.texts]
        left.sort(key=lambda f: (-self.gain(f) / max(1, self.cost(f)), -f.part, f.index))
        for f in left:
            if self.budget <= 8:
                break
            if not f.kept and f.text not in self.texts and self.cost(f) <= self.budget:
                self.keep(f)

    def left_out(self) -> tuple[int, int]:
        """(fragments, lines) that were worth keeping but did not fit."""
        frags = [f for f in self.c.frags if not f.kept and self.eligible(f, self.gain(f))]
        lines = {self.c.parts[f.part].line for f in frags}
        return len(frags), sum(1 for n in lines if not self.c.lines[n].opened)

    def _push(self, heap: list[tuple[float, int, int]], n: int, max_layer: int) -> None:
        f = self.c.frags[n]
        if not f.kept and f.layer <= max_layer and (g := self.gain(f)) > 0:
            heapq.heappush(heap, (-g / self.cost(f), -n, n))  # newer first on a tie

    def _greedy(self, max_layer: int) -> None:
        frags = self.c.frags
        heap: list[tuple[float, int, int]] = []
        for n in range(len(frags)):
            self._push(heap, n, max_layer)
        while heap and self.budget > 0:
            neg, _, n = heapq.heappop(heap)
            f = frags[n]
            if f.kept:
                continue
            g = self.gain(f)
            density = g / self.cost(f)
            if g > 0 and density < -neg - 1e-9:  # stale: worth less now, rank again
                heapq.heappush(heap, (-density, -n, n))
                continue
            if not self.eligible(f, g) or self.cost(f) > self.budget:
                continue
            line = self.c.parts[f.part].line
            opened = not self.c.lines[line].opened
            self.keep(f)
            if opened:  # the rest of this line got cheaper: rank it again
                for p in self.c.lines[line].parts:
                    for m in self.c.parts[p].frags:
                        self._push(heap, m, max_layer)


def render(c: Candidates) -> dict[str, list[Fact]]:
    """Kept fragments as statements, by section, in record order. Adjacent fragments
    join as in the source; a gap shows as "…"."""
    sections: dict[str, list[Fact]] = {name: [] for name in SECTION_TITLES}
    for line in c.lines:
        text = line.head
        ids: list[str] = []
        for p in line.parts:
            part = c.parts[p]
            kept = [c.frags[m] for m in part.frags if c.frags[m].kept]
            if not kept:
                continue
            body = ""
            for k, f in enumerate(kept):
                if k:
                    body += f.sep if f.index == kept[k - 1].index + 1 else " … "
                body += f.text
            text += (part.prefix if ids else part.first_prefix) + body + part.suffix
            ids.append(part.source_id)
        if ids:
            sections[line.section].append(fact(text, *ids, origin=line.origin, key=line.key))
    return sections


def fact(statement: str, *ids: str, origin: str = "", key: str = "") -> Fact:
    statement = statement.strip()
    if claims_plan_state(statement):  # quoted history, not a directive (R11.5)
        statement = f"said: {statement}"
    return Fact(statement or "(empty)", tuple(dict.fromkeys(ids)), origin, key)


def path_list(touched: list[str], facts: list[Fact], allowance: int, limit: int) -> list[str]:
    """A short ranked path list within ``allowance`` characters: touched files first,
    then paths the kept lines name; at most ``limit``."""
    ranked = dict.fromkeys(touched)
    for f in facts:
        for m in PATH.finditer(f.statement):
            ranked.setdefault(m.group(0).rstrip("."), None)
    out: list[str] = []
    for path in ranked:
        if len(out) >= limit or allowance < len(path) + 3:
            break
        out.append(path)
        allowance -= len(path) + 3
    return out


def _rank(part: Part, order: dict[str, int]) -> int:
    return part.rank if part.rank is not None else order.get(part.source_id, -1)
