"""The structural floor of a summary: what observation masking keeps, compressed to fit
the bound. Pure.

Every floor fragment (``fill.Frag.tier`` set) is kept, each shortened from the middle to
the same *level* times its weight (``fill.Cap``: a user's words weigh more than a step's
prose), the level as high as the bound allows — water-filling: short texts stay whole,
long ones share what is left. Only when even the shortest allowed forms do not fit are
fragments dropped: the highest tier first (prose and result stubs before calls and
errors, those before the user's words, the author's recorded entries last), within a
tier the ones nothing ranks up (``Frag.cue``: a failed call's lines, by structure;
decision wording, a heuristic that only orders) first, then the oldest. So when the
bound binds, the newest user requests are the last to go — but the newest calls and
errors keep a share of the budget (``SHARES``), by kind of record, never by words.
A fragment a newer one repeats word for word (a retried call, the same error again)
goes first within its tier. A roll-up shortens no lower than a level of its own and
drops whole entries instead (``keep_floor``'s ``least_level``): what a roll-up cuts
stays cut at every later one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from domain.compaction.drafts import SECTION_TITLES
from domain.compaction.extractive.fill import Fill, Frag, _rank, id_cost
from domain.compaction.extractive.segmentation import shorten, width

# Of the budget, what the newest calls and errors (tier 2) and answers (``Frag.group``:
# what a run concluded, where its decisions and questions are) keep when the user's words
# alone would fill it: shares by structure (a kind of record), never by words. A step's
# narration and result stubs (tier 3) get none: the calls beside them say what ran.
ANSWERS = "answers"
ASKS = "answers:asks"  # an answer that asks, by its punctuation: one of the answers too
# (group, share): the newest answers keep 18%, then the newest of those that ask and that
# no later user message took up (``Builder.settle_asks``: the question may still be
# open) another 12%. A group holds the groups its name starts. What a share keeps goes
# with the user's words, and goes after them: an old question nobody took up outlasts
# a request as old.
SHARES = (("2", 0.15), (ANSWERS, 0.18), (ASKS, 0.12))
PROTECTED = 1  # their tier then: the user's words'
_DIGITS = re.compile(r"\d+")
MIN_LEFT = 24  # a dropped fragment shortened below its least to fill a tiny bound: no less


class _Floor:
    def __init__(self, fill: Fill, frags: Sequence[Frag], least_level: float = 0.0) -> None:
        self.fill = fill
        self.frags = list(frags)
        self.least_level = least_level  # the level the alive set must fit at
        self.full = [width(f.full or f.text) for f in self.frags]
        self._again: set[int] | None = None  # ``repeats``, once read

    def cap(self, k: int, level: float) -> int:
        f, full = self.frags[k], self.full[k]
        c = f.cap
        if c is None or not c.weight:  # a stub: whole or not at all
            return full
        most = min(full, c.most) if c.most else full
        cut = min(most, max(c.least, int(c.weight * level)))
        return full if full <= cut * c.whole else cut

    def need(self, alive: Sequence[int], level: float) -> int:
        """Characters the ``alive`` fragments take at ``level``, with their frames: a
        part's prefix and citation, a line's frame, a section's title, once each."""
        return sum(self.cap(k, level) for k in alive) + self.frames(alive)

    def frames(self, alive: Sequence[int]) -> int:
        """What ``need`` adds to the fragments' own widths: each part's prefix and
        suffix (and the separators of its fragments after its first), each cited record
        of a line, each line's frame and each section's title."""
        c = self.fill.c
        parts: set[int] = set()
        lines: set[int] = set()
        sections: set[str] = set()
        total = 0
        cited: set[tuple[int, str]] = set()
        for k in alive:
            f = self.frags[k]
            if f.part in parts:
                total += len(f.sep)
                continue
            parts.add(f.part)
            part = c.parts[f.part]
            total += max(len(part.prefix), len(part.first_prefix)) + len(part.suffix)
            if (part.line, part.source_id) not in cited:
                cited.add((part.line, part.source_id))
                total += id_cost(part.source_id)
            if part.line not in lines:
                lines.add(part.line)
                line = c.lines[part.line]
                total += len(line.head) + 6
                if line.section not in sections:
                    sections.add(line.section)
                    total += len(SECTION_TITLES.get(line.section, line.section)) + 4
        return total

    def suffix_needs(self, order: Sequence[int], level: float) -> list[int]:
        """``need(sorted(order[n:]), level)`` for every n, in one pass from the end: the
        same sums (integers, in any order), each fragment added to the last set's."""
        c = self.fill.c
        firsts: dict[int, int] = {}  # part -> its first fragment (lowest index) so far
        cited: set[tuple[int, str]] = set()
        lines: set[int] = set()
        sections: set[str] = set()
        out = [0] * (len(order) + 1)
        total = 0
        for n in range(len(order) - 1, -1, -1):
            k = order[n]
            f = self.frags[k]
            total += self.cap(k, level)
            first = firsts.get(f.part)
            if first is not None:  # the part's fragments pay their separators but the first
                new_first = min(first, k)
                total += len(f.sep) + len(self.frags[first].sep) - len(self.frags[new_first].sep)
                firsts[f.part] = new_first
                out[n] = total
                continue
            firsts[f.part] = k
            part = c.parts[f.part]
            total += max(len(part.prefix), len(part.first_prefix)) + len(part.suffix)
            if (part.line, part.source_id) not in cited:
                cited.add((part.line, part.source_id))
                total += id_cost(part.source_id)
            if part.line not in lines:
                lines.add(part.line)
                line = c.lines[part.line]
                total += len(line.head) + 6
                if line.section not in sections:
                    sections.add(line.section)
                    total += len(SECTION_TITLES.get(line.section, line.section)) + 4
            out[n] = total
        return out

    def level(self, alive: Sequence[int], budget: int) -> float:
        """The highest level at which ``alive`` fits ``budget`` (0 when none does)."""
        lo, hi = 0.0, float(max(self.full, default=0) + 1)
        frames = self.frames(alive)  # the same at every level
        if sum(self.cap(k, hi) for k in alive) + frames <= budget:
            return hi
        for _ in range(24):
            mid = (lo + hi) / 2
            if sum(self.cap(k, mid) for k in alive) + frames <= budget:
                lo = mid
            else:
                hi = mid
        return lo

    def least(self, k: int) -> int:
        """About what fragment ``k`` takes at its least, with its part's frame."""
        part = self.fill.c.parts[self.frags[k].part]
        return self.cap(k, 0) + id_cost(part.source_id) + len(part.first_prefix) + 6

    def repeated(self, age: Sequence[int]) -> set[int]:
        """Fragments whose whole text a newer fragment says again, word for word (a
        retried call, the same error each time): the newest one says it for all. Stubs
        (never shortened: "failed") are not repetitions — each says a call happened. A
        sentence of an answer repeats one that differs only in its numbers (progress
        boilerplate: "Round 12 done.", "第12轮收尾。"): it goes first and takes no share."""
        out: set[int] = set()
        said: set[str] = set()
        for k in sorted(range(len(self.frags)), key=lambda k: (age[k], k), reverse=True):
            f = self.frags[k]
            if f.cap is None or not f.cap.weight:
                continue
            text = f.full or f.text
            if f.group.startswith(ANSWERS):  # "Round 12 done." says what "Round 13 done." does
                text = _DIGITS.sub("#", text)
            if text in said:
                out.add(k)
            said.add(text)
        return out

    def repeats(self) -> set[int]:
        """``repeated`` at the fragments' ages: the same at every call (their whole
        texts, groups and records do not change), so found once."""
        if self._again is None:
            parts, order = self.fill.c.parts, self.fill.c.order
            self._again = self.repeated([_rank(parts[f.part], order) for f in self.frags])
        return self._again

    def order(self, budget: int) -> list[int]:
        """The drop order: the highest tier first, within a tier the repetitions
        (``repeated``), then what nothing ranks up (``Frag.cue``), then the oldest. But
        the newest of each group (calls and errors, answers), ranked-up first, up
        to their ``SHARES`` of the budget, go with the user's words: a long session's
        requests never push every command out."""
        frags = self.frags
        parts, order = self.fill.c.parts, self.fill.c.order
        age = [_rank(parts[f.part], order) for f in frags]
        again = self.repeats()
        tier = {k: frags[k].tier or 0 for k in range(len(frags))}
        group = {k: frags[k].group or str(tier[k]) for k in tier}
        shared: set[int] = set()  # kept by their group's share: the last of the tier to go
        for g, share in SHARES:
            members = sorted(
                (
                    k
                    for k in tier
                    if group[k].startswith(g) and k not in again and tier[k] != PROTECTED
                ),
                key=lambda k: (frags[k].cue, age[k], k),
                reverse=True,
            )
            room = budget * share
            for k in members:
                room -= self.least(k)
                if room < 0:
                    break
                tier[k] = PROTECTED
                shared.add(k)
        return sorted(
            range(len(frags)),
            key=lambda k: (
                -tier[k],
                k not in again,
                k in shared,
                frags[k].cue,
                age[k],
                frags[k].inner,
                k,
            ),
        )

    def alive(self, budget: int) -> list[int]:
        """The fragments kept: all, or all but the fewest first in drop order that
        make the least forms (at ``least_level``) fit."""
        least = self.least_level
        every = list(range(len(self.frags)))
        if self.need(every, least) <= budget:
            return every
        order = self.order(budget)
        needs = self.suffix_needs(order, least)  # needs[n]: what order[n:] needs
        lo, hi = 1, len(order)  # drop order[:n]: the smallest n that fits
        while lo < hi:
            mid = (lo + hi) // 2
            if needs[mid] <= budget:
                hi = mid
            else:
                lo = mid + 1
        return sorted(order[lo:])


def keep_floor(fill: Fill, least_level: float = 0.0) -> None:
    """Keep every floor fragment of ``fill``'s candidates that fits, shortened to a
    common level (see the module); what the floor leaves stays in ``fill.budget``.
    ``least_level``: the lowest level shortening may go to before whole fragments are
    dropped (a roll-up's: ``draft.ROLLUP_LEVEL``)."""
    frags = [f for f in fill.c.frags if f.tier is not None and not f.kept]
    if not frags:
        return
    for f in frags:
        f.full = f.full or f.text
    floor = _Floor(fill, frags, least_level)
    alive = floor.alive(fill.budget)
    level = floor.level(alive, fill.budget)
    for k in alive:
        f = frags[k]
        f.text = _shorten(f, floor.cap(k, level))
        if f.text:
            fill.keep(f)
    _widen(fill, floor, alive, level)
    # The drop was estimated in whole parts and lines: what still fits of the dropped,
    # the last dropped first, at its least (or, in a tiny bound, what is left); never a
    # repetition of a newer fragment.
    kept = set(alive)
    again = floor.repeats()
    for k in reversed(floor.order(fill.budget + 1)):
        f = frags[k]
        if k in kept or k in again or fill.budget <= 0:  # a repetition adds nothing
            continue
        f.text = _shorten(f, floor.cap(k, 0))
        frame = fill.cost(f) - width(f.text)
        if fill.cost(f) > fill.budget and fill.budget - frame >= MIN_LEFT:
            f.text = _shorten(f, fill.budget - frame)  # a tiny bound: what fits of it
        if f.text and fill.cost(f) <= fill.budget:
            fill.keep(f)
        else:
            f.text = f.full


def _widen(fill: Fill, floor: _Floor, alive: list[int], level: float) -> None:
    """The estimate of the frames was an upper bound: what it left over widens the
    shortened fragments again, up to the level that still fits."""
    short = [k for k in alive if floor.frags[k].kept and floor.frags[k].text != floor.frags[k].full]
    if not short or fill.budget <= 0:
        return
    now = {k: width(floor.frags[k].text) for k in short}

    def extra(lv: float) -> int:
        return sum(max(0, floor.cap(k, lv) - now[k]) for k in short)

    lo, hi = level, float(max(floor.full) + 1)
    for _ in range(24):
        mid = (lo + hi) / 2
        if extra(mid) <= fill.budget:
            lo = mid
        else:
            hi = mid
    for k in short:
        f = floor.frags[k]
        text = _shorten(f, max(floor.cap(k, lo), now[k]))
        fill.budget -= width(text) - width(f.text)
        fill.texts.discard(f.text)
        f.text = text
        fill.texts.add(text)


def _shorten(f: Frag, limit: int) -> str:
    return shorten(f.full, limit, f.cap.head if f.cap else 0.7)
