"""Text segmentation in any language, and what a text costs in summary tokens. Pure.

Sentences end at ``.!?`` followed by a space, and at the CJK full stop ``。`` and the
full-width ``!``, ``?`` and ``;`` (U+FF01, U+FF1F, U+FF1B) with or without one: Chinese
and Japanese put no spaces between sentences. Words are ``\\w`` runs with ``re``'s
Unicode semantics — Cyrillic, accented Latin, Greek and CJK all count as letters.
Nothing here knows a language's words.

``width`` estimates a text's cost in characters of ASCII English (``fill.CHARS_PER_TOKEN``
per token): tokenizers spend more tokens per character on other scripts, so a summary in
Chinese or Russian would otherwise overshoot its bound several times over.
"""

from __future__ import annotations

import re

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


def char_width(ch: str) -> float:
    """What one character costs, in ASCII characters' worth of tokens (estimated for
    cl100k/o200k-style tokenizers)."""
    o = ord(ch)
    if o < 0x80:
        return 1.0
    if o < 0x250:  # accented Latin: é, ü, č
        return 1.6
    if o < 0x530:  # Greek, Cyrillic
        return 1.7
    if 0x2E80 <= o < 0xA000 or 0xAC00 <= o < 0xD7B0 or 0xF900 <= o < 0xFB00 or o >= 0xFF00:
        return 3.6  # CJK, kana, hangul, full-width forms: about a token each, often more
    return 2.5


def width(text: str) -> int:
    """``text``'s estimated cost in ASCII characters (its length when it is ASCII)."""
    if text.isascii():
        return len(text)
    return round(sum(char_width(ch) for ch in text))


def shorten(text: str, limit: int) -> str:
    """``text`` within ``limit`` (``width``), shortened from the middle: its head and
    its tail stay — a command's program and its target, a request's ask and its last
    words — and "…" marks the cut. Cuts fall on spaces where one is near."""
    if width(text) <= limit:
        return text
    if limit <= 1:
        return ELLIPSIS if limit == 1 else ""
    # characters to keep, scaled by the text's average width per character
    ratio = len(text) / max(1, width(text))
    keep = max(1, int((limit - 1) * ratio))
    head_n = (keep + 1) // 2 + keep // 6  # the head says what it is: a little more of it
    tail_n = max(0, keep - head_n)
    head, tail = text[:head_n], text[len(text) - tail_n :] if tail_n else ""
    cut = head.rfind(" ")
    if cut > head_n * 0.7:
        head = head[:cut]
    cut = tail.find(" ")
    if 0 <= cut < tail_n * 0.3:
        tail = tail[cut + 1 :]
    out = head.rstrip() + ELLIPSIS + tail.lstrip()
    while width(out) > limit and len(out) > 1:  # rounding: trim the head
        head = head[:-1]
        out = head.rstrip() + ELLIPSIS + tail.lstrip()
    return out
