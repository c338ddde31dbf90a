"""Text segmentation in any language, and what a text costs in summary tokens. Pure.

Sentences end at ``.!?`` followed by a space, and at the CJK full stop ``。`` and the
full-width ``!``, ``?`` and ``;`` (U+FF01, U+FF1F, U+FF1B) with or without one: Chinese
and Japanese put no spaces between sentences. Words are ``\\w`` runs with ``re``'s
Unicode semantics — Cyrillic, accented Latin, Greek and CJK all count as letters.
Nothing here knows a language's words.

``width`` estimates a text's cost in tokens (in units of ``CHARS_PER_TOKEN``) by the
pieces a tokenizer makes — words, digit groups, punctuation — in any script: counting
characters would let a Chinese or Russian summary overshoot its bound several times
over, and leave an English one well under it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

# A sentence end: Latin punctuation and a space, or a CJK/full-width stop, space or not.
CJK_STOPS = "\u3002\uff01\uff1f"  # 。 and the full-width ! ?
FULL_QUESTION = "\uff1f"
FULL_SEMICOLON = "\uff1b"
SENTENCE_END = re.compile(rf"(?<=[.!?])\s+(?=[^\s.])|(?<=[{CJK_STOPS}])\s*(?=\S)")
# Prose: clauses too — a ";" (ASCII or full-width) or a dash that opens an aside.
CLAUSE_END = re.compile(
    rf"(?<=[.!?;])\s+(?=[^\s.])|(?<=[{CJK_STOPS}{FULL_SEMICOLON}])\s*(?=\S)|\s+(?=—\s)"
)
# closing quotes and brackets that may follow a question mark
_CLOSERS = " \"'\u201d\u00bb)\uff09\u300d\u300f"
WORD = re.compile(r"\w+")
ELLIPSIS = "…"


def sentences(text: str) -> list[str]:
    """The sentences of one line of text, stripped, in order."""
    return [s.strip() for s in SENTENCE_END.split(text) if s.strip()]


def is_question(sentence: str) -> bool:
    """Asks, by its punctuation: ends with "?" or the full-width one (any language)."""
    return sentence.rstrip(_CLOSERS).endswith(("?", FULL_QUESTION))


def words(text: str) -> list[str]:
    """Its words, case-folded: ``\\w`` runs in any script."""
    return WORD.findall(text.casefold())


def one_line(text: str) -> str:
    return " ".join(text.split())


# Token-shaped pieces: a run of letters (any script), up to three digits (tokenizers
# group digits so), one punctuation mark.
_PIECE = re.compile(r"[^\W\d_]+|\d{1,3}|[^\w\s]|_")
_LETTERS = re.compile(r"[^\W\d_]+")
_DIGITS = re.compile(r"\d{1,3}")
_MARKS = re.compile(r"[^\w\s]|_")
_SPACED = re.compile(r"(?<=\s)(?:[^\w\s]|_)")  # a mark after a space: a token of its own
_PAST6 = re.compile(r"(?<=[^\W\d_]{6})[^\W\d_]")  # each letter past a word's sixth
_WORD_BEYOND_ASCII = re.compile(r"(?![\x00-\x7f])\w")  # a letter or digit beyond ASCII
_MARK_BEYOND_ASCII = re.compile(r"(?![\x00-\x7f])[^\w\s]")
CHARS_PER_TOKEN = 3.3  # the unit ``width`` counts in: an ASCII character of code
# Tokens per piece, fitted (least squares) to cl100k on summaries of the real-transcripts
# corpus (English, French, Russian, Chinese; requests, prose, calls, tool output; record
# ids as the corpus writes them and as 32 hex digits): a mark after a space is a token
# of its own, one between words mostly merges with them; digits mixed with letters
# split further than in plain numbers. Within about 2% of the count per language and
# about 7% per line, either way (``draft.ROLLUP_HEADROOM`` allows for that).
T_WORD, T_PAST6, T_DIGITS, T_MARK, T_SPACED = 1.0, 0.25, 1.3, 0.3, 1.4
T_MARK_BEYOND_ASCII = 1.0  # "…", "→", a CJK comma
_SCALE = CHARS_PER_TOKEN


def _tokens(piece: str, foreign: bool) -> float:
    """Estimated tokens of one piece (cl100k/o200k-style tokenizers). ``foreign``: the
    text has letters beyond ASCII — its Latin words are then mostly names and code."""
    ch = piece[0]
    if not ch.isalpha():  # a non-ASCII mark ("…", "→", a CJK comma): a token
        return T_DIGITS if ch.isdigit() else T_MARK if ch.isascii() else T_MARK_BEYOND_ASCII
    n = len(piece)
    if piece.isascii():
        return 0.65 + 0.1 * n if foreign else T_WORD + T_PAST6 * max(0, n - 6)
    o = ord(ch)
    if o >= 0x2E80:  # CJK, kana, hangul: about a token a character
        return 1.03 * n
    if o < 0x250:  # accented Latin: é, ü, č
        return 0.84 + 0.21 * n
    return 0.5 + n / 2.2  # Cyrillic, Greek and the rest


@functools.lru_cache(maxsize=131_072)  # a fragment's width is asked for again and again
def width(text: str) -> int:
    """``text``'s estimated cost in tokens, in units of ``CHARS_PER_TOKEN`` (so about its
    length for English prose or code): words, digit groups and punctuation counted as a
    tokenizer splits them, in any script."""
    counts = _counts(text)
    return _from_counts(counts) if counts is not None else _width_by_piece(text)


def width_joined(parts: Sequence[str]) -> int:
    """``width`` of ``parts`` joined by line breaks, from each part's counts (cached: a
    roll-up's lines come back in each later summary). The counts add up: no piece spans
    a line break, and a part after one that starts with a mark has a space before it."""
    total = [0] * 6
    for k, part in enumerate(parts):
        counts = _part_counts(part)
        if counts is None:  # words beyond ASCII: counted over the whole text
            return width("\n".join(parts))
        for i, n in enumerate(counts):
            total[i] += n
        if k and _MARKS.match(part):
            total[4] += 1
    return _from_counts(tuple(total))


Counts = tuple[int, ...]  # letters runs, letters past six, digit groups, marks, spaced, beyond


def _counts(text: str) -> Counts | None:
    """The pieces ``width`` weighs in a text without words beyond ASCII (counted in C, as
    ``_tokens`` counts them piece by piece); None for a text with them."""
    if not text.isascii() and _WORD_BEYOND_ASCII.search(text) is not None:
        return None
    beyond = 0 if text.isascii() else len(_MARK_BEYOND_ASCII.findall(text))
    return (
        len(_LETTERS.findall(text)),
        len(_PAST6.findall(text)),
        len(_DIGITS.findall(text)),
        len(_MARKS.findall(text)),
        len(_SPACED.findall(text)),
        beyond,  # marks (a summary's "…" and "→") beyond ASCII
    )


_part_counts = functools.lru_cache(maxsize=65_536)(_counts)


def _from_counts(counts: Counts) -> int:
    words, past6, digits, marks, spaced, beyond = counts
    tokens = (
        T_WORD * words
        + T_PAST6 * past6
        + T_DIGITS * digits
        + T_MARK * marks
        + (T_SPACED - T_MARK) * spaced
    )
    if beyond:
        tokens += (T_MARK_BEYOND_ASCII - T_MARK) * beyond
    return round(_SCALE * tokens)


def _width_by_piece(text: str) -> int:
    """``width`` of a text with words beyond ASCII: piece by piece."""
    foreign = any(ch.isalpha() for ch in _WORD_BEYOND_ASCII.findall(text))
    spaced = (T_SPACED - T_MARK) * len(_SPACED.findall(text))
    return round(
        _SCALE * (spaced + sum(_tokens(m.group(0), foreign) for m in _PIECE.finditer(text)))
    )


def shorten(text: str, limit: int, head_share: float = 0.7) -> str:
    """``text`` within ``limit`` (``width``), shortened from the middle: its head (the
    larger part, ``head_share``) and its tail stay — a command's program and its target,
    a request's ask and its last words — and "…" marks the cut. Cuts fall on spaces
    where one is near."""
    if width(text) <= limit:
        return text
    if limit < width(ELLIPSIS) + 1:
        return ""
    lo, hi = 0, len(text)  # the most characters whose shortened form fits
    best = ELLIPSIS
    while lo <= hi:
        keep = (lo + hi) // 2
        out = _cut(text, keep, head_share)
        if width(out) <= limit:
            best, lo = out, keep + 1
        else:
            hi = keep - 1
    return best


def _cut(text: str, keep: int, head_share: float) -> str:
    head_n = max(1, int(keep * head_share))
    tail_n = max(0, keep - head_n)
    head = text[:head_n]
    tail = text[len(text) - tail_n :] if tail_n else ""
    cut = head.rfind(" ")
    if cut > head_n * 0.8:
        head = head[:cut]
    cut = tail.find(" ")
    if 0 <= cut < tail_n * 0.2:
        tail = tail[cut + 1 :]
    return head.rstrip() + ELLIPSIS + tail.lstrip()


# An echo: a later text repeats a run of this one — three words in a row, or six
# characters of an unspaced script (CJK: about as much meaning).
ECHO_WORDS, ECHO_CHARS = 3, 6
UNSPACED = 0x2E80  # from here on (CJK, kana) a script writes no spaces between words


def echo_grams(text: str) -> frozenset[str]:
    """The runs of ``text`` that another text repeats when it takes ``text`` up: word
    triples, and six-character runs of an unspaced script, case-folded."""
    out: set[str] = set()
    spaced: list[str] = []
    for w in words(text):
        if any(ord(ch) >= UNSPACED for ch in w):
            out.update(w[k : k + ECHO_CHARS] for k in range(len(w) - ECHO_CHARS + 1))
            continue
        spaced.append(w)
    for k in range(len(spaced) - ECHO_WORDS + 1):
        out.add(" ".join(spaced[k : k + ECHO_WORDS]))
    return frozenset(out)
