"""What in a piece of agent history is worth keeping: text heuristics, no model. Pure.

The extractive summarizer spends its budget on *fragments* (a sentence of prose, a line
of tool output, one tool call) by how many distinct salient things each adds per
character. This module finds those things:

- **features**, counted once per summary however often they recur: file paths, numbers
  with units or decimals, identifiers (hashes, ticket-style ids, UPPER_SNAKE names, error
  codes, back-quoted names), code-style names (weighted low: source listings are full of
  them);
- **cues**, which only *order*: an error's shape (``signals``, in any language; it also
  makes an error's quoted names identifiers) and decision wording (``DECISION_CUE``,
  English, the one word list left: docs/design-notes.md). What a summary keeps at all,
  and which section an entry goes to, comes from structure (who wrote it, a tool's
  status, a call's arguments, the shape of an error line) or from explicit records.

Nothing here knows what a particular session or benchmark looks like: the rules are the
general shapes facts take in agent transcripts, in any script (``\\w`` is Unicode).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from domain.compaction.extractive.feature_patterns import (
    CODE_NAME,
    ERROR_NAMES,
    IDENT,
    INTEGER,
    MEASURE,
    PATH,
    QUOTED,
)
from domain.compaction.extractive.pruned import Pruned
from domain.compaction.extractive.segmentation import CLAUSE_END, SENTENCE_END
from domain.compaction.extractive.signals import ERROR_SHAPE, error_shaped

# Decision wording (English; ``is_decision``): orders a run's answer sentences and a
# step's narration, never classifies.
DECISION_CUE = re.compile(
    r"\b(?:i'll|i will|i'm going to|i am going to|we'll|we will|we're going to|let's|let us"
    r"|decided|decide to|decision|we should|i'd rather|going with|go with|opt(?:ed|ing)? for"
    r"|chose|choosing|switch(?:ed|ing)?(?: \S+){0,4} to|settled on|plan to|planning to|going to"
    r"|instead of|rather than|will use|won't|will not|prefer|the fix is|the plan is"
    r"|(?:best|chosen|preferred) (?:option|approach|fix)|agreed (?:on|to)|stick with)\b"
    # a user's "do X, not Y" / "X, not Y": the choice and what it rules out
    r"|^(?!.*\?\s*$)[^,;]{6,}, not (?!sure\b|yet\b|only\b|just\b|all\b|always\b)[^\W\d]"
    # an imperative choice: "Use X for …", "Please switch …"
    r"|^(?:please |so |ok,? )?(?:use|pick|adopt|switch to|stay on|keep using)\b",
    re.I,
)
# Weights: what one distinct feature or cue adds to a fragment's worth.
W_PATH = 1.0
W_PATH_TOUCHED = 1.5  # a path a tool call was given: a file actually read, run or edited
W_PATH_OUTPUT = 0.8  # a path in tool output (a hit list's many weigh less: ``shape``)
W_MEASURE = 1.0
W_INTEGER = 0.4
W_IDENT = 1.0
W_CODE = 0.3  # in tool output; in prose W_IDENT
W_ERROR = 1.5
W_DECISION = 2.0

Feature = tuple[str, str]  # (kind, normalized value)
FRAGMENT_CHARS = 240  # a fragment longer than this is clipped around what is salient
ARG_READ = 2_000  # of an argument value, the head and the tail read (the floor shortens)


@functools.lru_cache(maxsize=65_536)  # roll-ups see the same entries again and again
def features(
    text: str, *, path_weight: float = W_PATH, code_weight: float = W_CODE
) -> dict[Feature, float]:
    """The distinct salient things in ``text`` with their weights (cached: read only).
    ``code_weight``: a code-style name in prose is a deliberate mention, in a listing
    one name of many."""
    out: dict[Feature, float] = {}

    def put(kind: str, value: str, weight: float) -> None:
        key = (kind, value)
        if out.get(key, 0.0) < weight:
            out[key] = weight

    for m in PATH.finditer(text):
        put("path", m.group(0).rstrip("."), path_weight)
    for m in MEASURE.finditer(text):
        put("num", m.group(0).replace(" ", "").lower(), W_MEASURE)
    for m in INTEGER.finditer(text):
        put("num", m.group(0), W_INTEGER)
    for m in IDENT.finditer(text):
        put("id", m.group(0), W_IDENT)
    for m in QUOTED.finditer(text):
        put("id", m.group(1), W_IDENT)
    for m in CODE_NAME.finditer(text):
        put("id", m.group(0), code_weight)
    names = list(ERROR_NAMES.finditer(text))  # what an error names: KeyError: 'currency_code'
    if names and error_shaped(text):
        for m in names:
            put("id", next(g for g in m.groups() if g), W_IDENT)
    return out


# Texts read together are joined by a blank line: no pattern here matches across a line
# break (``MEASURE``'s one optional space stops at the second), and a line break before
# or after a text is what its edge is to every lookaround and ``\b``.
_JOIN = "\n\n"


def _joined(texts: Sequence[str]) -> tuple[str, list[int]]:
    """``texts`` joined, and where each ends in the joined text."""
    ends, at = [], 0
    for t in texts:
        at += len(t)
        ends.append(at)
        at += len(_JOIN)
    return _JOIN.join(texts), ends


def _by_text(
    pattern: re.Pattern[str] | Pruned, joined: str, ends: list[int]
) -> Iterator[tuple[int, re.Match[str]]]:
    """``pattern``'s matches in ``joined``, each with the index of the text it is in."""
    i = 0
    for m in pattern.finditer(joined):
        while m.start() >= ends[i]:
            i += 1
        yield i, m


def features_each(
    texts: Sequence[str], *, path_weight: float = W_PATH, code_weight: float = W_CODE
) -> list[dict[Feature, float]]:
    """``features`` of each of ``texts`` (one line each: no line break), the same
    features in the same order, read with one pass of each pattern over them all (a
    pattern's call costs more than a short line's matching)."""
    joined, ends = _joined(texts)
    out: list[dict[Feature, float]] = [{} for _ in texts]

    def put(i: int, kind: str, value: str, weight: float) -> None:
        key = (kind, value)
        if out[i].get(key, 0.0) < weight:
            out[i][key] = weight

    for i, m in _by_text(PATH, joined, ends):
        put(i, "path", m.group(0).rstrip("."), path_weight)
    for i, m in _by_text(MEASURE, joined, ends):
        put(i, "num", m.group(0).replace(" ", "").lower(), W_MEASURE)
    for i, m in _by_text(INTEGER, joined, ends):
        put(i, "num", m.group(0), W_INTEGER)
    for i, m in _by_text(IDENT, joined, ends):
        put(i, "id", m.group(0), W_IDENT)
    for i, m in _by_text(QUOTED, joined, ends):
        put(i, "id", m.group(1), W_IDENT)
    for i, m in _by_text(CODE_NAME, joined, ends):
        put(i, "id", m.group(0), code_weight)
    # what an error names (KeyError: 'currency_code'), in a text shaped as an error: the
    # shape is looked for only in texts that name something
    names = list(_by_text(ERROR_NAMES, joined, ends))
    cued = {i: error_shaped(texts[i]) for i in dict.fromkeys(i for i, _ in names)}
    for i, m in names:
        if cued[i]:
            put(i, "id", next(g for g in m.groups() if g), W_IDENT)
    return out


def errors_each(lines: Sequence[str], signals: Sequence[bool]) -> list[bool]:
    """``error_shaped`` of each line: ERROR_SHAPE in one pass, or its ``signals[i]``."""
    named = {i for i, _ in _by_text(ERROR_SHAPE, *_joined(lines))}
    return [i in named or signals[i] for i in range(len(lines))]


def is_decision(sentence: str) -> bool:
    """Decision wording (English; a heuristic that only orders, never classifies)."""
    return DECISION_CUE.search(sentence) is not None


_DECORATION = re.compile(r"([=\-_*#~+.])\1{3,}")


def one_line(text: str) -> str:
    """Whitespace collapsed and decoration runs ("=====", "-----") cut to one char."""
    flat = _DECORATION.sub(r"\1", text) if _DECORATION.search(text) else text  # mostly none
    return " ".join(flat.split()).strip("=-_*#~ ")


def clip(text: str, limit: int = FRAGMENT_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters: a window that starts just
    before the first salient thing when that lies beyond the limit, marked with "…"."""
    flat = one_line(text[: limit * 8])
    if len(flat) <= limit:
        return flat
    spans = [m.start() for p in (PATH, MEASURE, IDENT, ERROR_SHAPE) for m in p.finditer(flat)]
    start = max(0, min(spans) - 24) if spans and min(spans) > limit - 40 else 0
    if start:
        start = flat.find(" ", start) + 1 or start
    body = flat[start : start + limit - 2].rstrip()
    return ("…" if start else "") + body + "…"


@dataclass(frozen=True)
class Piece:
    """A fragment of a record's text, in order."""

    text: str
    index: int
    line_start: bool  # begins a new line of the source (tool output, pasted text)
    sep: str = " "  # what joined it to the previous piece ("; " after a clause)


def pieces(text: str, *, prose: bool = False, head: int = 12_000, tail: int = 4_000) -> list[Piece]:
    """Split text into lines, and lines into sentences (prose: every line; output: long
    lines only). Only the first ``head`` and last ``tail`` characters are read: a huge
    result's facts are in its head and its tail, and this bounds the work."""
    if len(text) > head + tail:
        text = text[:head] + "\n" + text[-tail:]
    out: list[Piece] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if prose:
            parts = CLAUSE_END.split(stripped)
        else:
            parts = SENTENCE_END.split(stripped) if len(stripped) > 80 else [stripped]
        sep = " "
        for k, part in enumerate(parts):
            part = part.strip()
            if part.endswith(";"):  # a clause: the ";" joins it to the next one
                part, next_sep = part[:-1].rstrip(), "; "
            else:
                next_sep = " "
            if part:
                out.append(Piece(part, len(out), k == 0, sep))
            sep = next_sep
    return out


_SHAPE_NUM = re.compile(r"\b[0-9a-f]{7,}\b|\d+")
_SHAPE_WORD = re.compile(r"[^\W\d_]+")  # letters of any script
_SHAPE_RUN = re.compile(r"(.)\1+")
# In ASCII text the words ``_lower_word`` makes "a": whole letter runs without a capital
# (there the only capitals are A-Z).
_SHAPE_LOWER_ASCII = re.compile(r"(?<![^\W\d_])[^\W\d_A-Z]+(?![^\W\d_])")


def _lower_word(m: re.Match[str]) -> str:
    word = m.group(0)
    return word if any(ch.isupper() for ch in word) else "a"


def shape(line: str) -> str:
    """A line with its numbers, hashes and lower-case (or caseless: CJK) words
    abstracted: log lines, table rows, grep hits and code lines of one output share a
    few shapes, while the error, the summary or the odd line out has its own."""
    return _SHAPE_RUN.sub(r"\1", _SHAPE_WORD.sub(_lower_word, _SHAPE_NUM.sub("9", line)))


def shapes(lines: Sequence[str]) -> list[str]:
    """``shape`` of each of ``lines`` (no line break in any), in one pass: no pattern of
    a shape matches a line break."""
    if not lines:
        return []
    text = "\n".join(lines)
    if not text.isascii():
        return shape(text).split("\n")
    # ASCII: the letter runs to abstract are told by a pattern, not a call per word
    words = _SHAPE_LOWER_ASCII.sub("a", _SHAPE_NUM.sub("9", text))
    return _SHAPE_RUN.sub(r"\1", words).split("\n")


def is_noise(line: str) -> bool:
    """Separator rules, progress dots and bare punctuation carry nothing."""
    core = line.strip("=-_*#.>|:+~ \t")
    if len(core) < 3:
        return True
    letters = 0  # fewer than two letters: "[58%]", "| 4006 |"
    for ch in core:  # most lines have two letters within their first few characters
        if ch.isalpha():
            letters += 1
            if letters == 2:
                return False
    return True


def render_call(name: str, arguments: str) -> str:
    """``name(value, value…)``: argument values without their keys, whole — the floor
    (``floor``) shortens a long call from the middle, keeping the program and its
    target. Non-JSON arguments as they are."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return f"{name}({one_line(arguments)})"
    values = list(parsed.values()) if isinstance(parsed, dict) else [parsed]
    return f"{name}({', '.join(_arg(v) for v in _flat(values))})"


def _flat(values: object) -> Iterator[object]:
    for v in values if isinstance(values, (list, tuple)) else [values]:
        if isinstance(v, dict):
            yield from _flat(list(v.values()))
        elif isinstance(v, list):
            yield from _flat(v)
        else:
            yield v


def _arg(value: object) -> str:
    if isinstance(value, str):
        if len(value) > ARG_READ * 2:  # a file's whole content: its ends say which
            value = f"{value[:ARG_READ]} … {value[-ARG_READ:]}"
        text = " ".join(value.split())
        simple = text and not any(c in text for c in " ,()\"'")
        return text if simple else json.dumps(text, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


def call_paths(arguments: str) -> list[str]:
    """Paths named in a tool call's arguments: the files it actually touched."""
    return [m.group(0).rstrip(".") for m in PATH.finditer(arguments)]
