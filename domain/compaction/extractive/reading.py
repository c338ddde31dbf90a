"""A tool result read once: its lines, which carry an error signal, and what each of the
others is worth to the greedy — a pure function of the result's text and whether the
call failed, memoised by that content. Pure.

A job over its bound summarizes everything it covers again from the records (R11.8,
``core.finish``), so the same results are read at every job of a session: reading is
most of what a draft costs, and it never changes. ``read_result`` keeps the last
readings in a bounded LRU, keyed by the content itself (equal content, equal reading;
no record id or session in the key), bounded by the characters it holds.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import domain.compaction.extractive.salience as sal
from domain.compaction.extractive.fill import MIN_GAIN
from domain.compaction.extractive.segmentation import one_line
from domain.compaction.extractive.signals import is_signal, signal_lines

READ_HEAD, READ_TAIL = 12_000, 4_000  # of a huge result: its facts are in its ends
# Worth of a tool result's other lines in the greedy, by where they sit.
PRIOR_OUTPUT_HEAD = 0.25  # a result's first line
PRIOR_OUTPUT_TAIL = 0.3  # its last two lines: totals, exit codes, the verdict
PRIOR_NEAR_SIGNAL = 0.5  # the line or two before an error line: what led to it
REPEATED = 3  # lines of one shape in a result: the greedy may keep them, the top-up not
# Memoised readings held, in bytes: each one's text (its key) and the reading it keeps,
# weighed by ``_weight``. A long session's compaction reads its covered results again
# (``domain.compaction.core.finish`` re-derives), so the memo holds many sessions' worth.
MEMO_BYTES = 32_000_000
# What a reading's parts cost in CPython (measured with tracemalloc, rounded up): the
# reading and its tuple, a slot a line, a use kept (object, clipped text aside), a feature.
READING_BYTES, SLOT_BYTES, USE_BYTES, FEATURE_BYTES = 1_000, 8, 300, 250


@dataclass(frozen=True)
class Signal:
    """A line with an error signal: a floor fragment (``Builder.output``)."""

    text: str
    sep: str
    inner: int  # its place among the result's signal lines
    last: bool  # the last of them (the exception, the verdict): ranked up


@dataclass(frozen=True)
class Other:
    """Any other line worth a fragment for the greedy: its features scaled by how often
    its shape repeats in the result."""

    text: str
    sep: str
    base: float  # prior and cue, scaled
    layer: int  # ``fill.Frag.layer``
    feats: Mapping[sal.Feature, float]


# What a line becomes; None: an inert line (``fill.Candidates.skip``), counted only.
LineUse = Signal | Other | None


@dataclass(frozen=True)
class ResultLines:
    lines: int  # the result's non-blank lines (of a huge one: its head and tail)
    signals: bool  # some line shows an error signal (by its shape, ``signals``)
    uses: tuple[LineUse, ...]  # one per line that is not noise, in order


def _read(text: str, failed: bool, inert: bool = True) -> ResultLines:
    """``text``'s non-blank lines: those with an error signal (``found``) for the floor,
    the last ranked up (a failed call's first line too when it has none); the others for
    the greedy, with the shape of a line repeated n times worth about sqrt(n) lines
    together. ``inert``: lines nothing would keep are marked None, not built."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    flags = [is_signal(ln) for ln in lines]  # once: the floor's lines and the cues read them
    found = signal_lines(lines, flags)
    signal = {k: n for n, k in enumerate(found)}
    if failed and not signal and lines:
        signal = {0: 0}
    shapes = sal.shapes(lines)
    counts = Counter(shapes)
    # the other lines (not signal, not noise), read together: their features and cues
    others = [k for k, ln in enumerate(lines) if k not in signal and not sal.is_noise(ln)]
    clipped = {k: sal.clip(lines[k], 200) for k in others}
    found_in = sal.features_each(
        list(clipped.values()), path_weight=sal.W_PATH_OUTPUT, code_weight=sal.W_CODE
    )
    has = dict(zip(others, found_in, strict=True))
    cue = dict(
        zip(
            others,
            sal.errors_each([lines[k] for k in others], [flags[k] for k in others]),
            strict=True,
        )
    )
    uses: list[LineUse] = []
    for k, ln in enumerate(lines):
        sep = ": " if k == 0 else " | "
        if k in signal:
            said = sal.one_line(ln) or one_line(ln)
            uses.append(Signal(said, sep, signal[k], signal[k] == len(signal) - 1))
            continue
        if k not in has:  # noise
            continue
        scale = 1 / math.sqrt(counts[shapes[k]])
        base = sal.W_ERROR * scale if cue[k] else 0.0  # orders only
        if k + 1 in signal or k + 2 in signal:
            base += PRIOR_NEAR_SIGNAL
        if k == 0:
            base += PRIOR_OUTPUT_HEAD
        elif k >= len(lines) - 2:
            base += PRIOR_OUTPUT_TAIL
        # a line whose shape repeats (progress, rows, hits) is never filler
        layer = 1 if k == 0 else 2 if counts[shapes[k]] < REPEATED else 3
        feats = {f: w * scale for f, w in has[k].items()} if scale != 1.0 else has[k]
        if inert and layer == 3 and base + sum(feats.values()) < MIN_GAIN:
            uses.append(None)  # never eligible in the greedy, never a top-up
            continue
        uses.append(Other(clipped[k], sep, base, layer, feats))
    return ResultLines(len(lines), bool(found), tuple(uses))


class _Memo:
    """Readings by (text, failed), least recently used first out, bounded by about the
    bytes they hold (``_weight``)."""

    def __init__(self, limit: int, reader: Callable[[str, bool], ResultLines] = _read) -> None:
        self.limit = limit
        self.reader = reader
        self.held = 0
        self._readings: OrderedDict[tuple[str, bool], tuple[ResultLines, int]] = OrderedDict()

    def read(self, text: str, failed: bool) -> ResultLines:
        key = (text, failed)
        found = self._readings.get(key)
        if found is not None:
            self._readings.move_to_end(key)
            return found[0]
        reading = self.reader(text, failed)
        weight = _weight(text, reading)
        if weight <= self.limit:
            self._readings[key] = (reading, weight)
            self.held += weight
            while self.held > self.limit:
                _, (_, gone) = self._readings.popitem(last=False)
                self.held -= gone
        return reading


def _weight(text: str, reading: ResultLines) -> int:
    """About the bytes ``text`` and its reading hold."""
    kept = [u for u in reading.uses if u is not None]
    return (
        _bytes(text)
        + READING_BYTES
        + SLOT_BYTES * len(reading.uses)
        + sum(USE_BYTES + _bytes(u.text) for u in kept)
        + FEATURE_BYTES * sum(len(u.feats) for u in kept if isinstance(u, Other))
    )


def _bytes(text: str) -> int:
    """At most the bytes CPython holds ``text`` in: one a character when it is ASCII, up
    to four otherwise (a script outside Latin-1 takes two or four)."""
    return len(text) if text.isascii() else 4 * len(text)


_MEMO = _Memo(MEMO_BYTES)


def read_result(text: str, failed: bool) -> ResultLines:
    """``text`` (a tool result's, or a child's) read as ``Builder.output`` uses it;
    memoised (the same content always reads the same)."""
    if len(text) > READ_HEAD + READ_TAIL:  # key by what is read: a huge text's ends
        text = text[:READ_HEAD] + "\n" + text[-READ_TAIL:]
    return _MEMO.read(text, failed)
