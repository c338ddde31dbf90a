"""Open questions the later history answers (R11.7): an ``unresolved_questions`` entry of a
summary stays open only until a newer record takes it up with an answer. Pure.

A question is answered when a later user or assistant text says it is settled
("answered", "resolved", "turns out", "the answer is", …) and names the words that tell
the question apart — its content words, less those most open questions share
("production", "retries", …): all of three or fewer, all but one of more, at least
``MIN_WORDS``, and no other open question better. The entry then moves to the facts as
"answered later: …": history keeps that it was asked, and the open questions keep their
share for the ones still open.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable

from services.compaction.drafts import SummaryDraft

SETTLED = re.compile(
    r"\b(?:answered|resolved|settled|confirmed|turns out|turned out|found out|the answer is"
    r"|no longer (?:open|unclear)|figured out|answer(?: is)?:)",
    re.I,
)
MIN_WORDS = 2
COMMON = 0.5  # a word in more than this share of the open questions tells none apart
# What asks rather than names: these never identify a question.
_ASKING = frozenset(
    {
        "open",
        "question",
        "questions",
        "todo",
        "find",
        "whether",
        "which",
        "what",
        "when",
        "where",
        "does",
        "do",
        "did",
        "is",
        "are",
        "was",
        "were",
        "still",
        "unclear",
        "not",
        "sure",
        "unsure",
        "know",
        "yet",
        "need",
        "check",
        "confirm",
        "verify",
        "figure",
        "about",
        "the",
        "and",
        "for",
        "with",
        "from",
        "that",
        "this",
        "into",
        "use",
        "used",
        "uses",
        "using",
        "user",
        "said",
        "answered",
    }
)
_WORD = re.compile(r"[a-z0-9_]+")


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.casefold()) if len(w) > 2 and w not in _ASKING}


def _telling(question: str, common: frozenset[str]) -> set[str]:
    asked = _words(question)
    telling = asked - common
    return telling if len(telling) >= MIN_WORDS else asked


def _named(telling: set[str], text: set[str]) -> float:
    """The share of ``telling`` that ``text`` names, 0 when it names too few of them: all
    of three or fewer, all but one of more, and at least ``MIN_WORDS``."""
    n = len(telling & text)
    need = len(telling) if len(telling) <= 3 else len(telling) - 1
    return n / len(telling) if n >= max(MIN_WORDS, need) else 0.0


def answered(question: str, later: Iterable[str], common: frozenset[str] = frozenset()) -> bool:
    telling = _telling(question, common)
    return any(SETTLED.search(t) and _named(telling, _words(t)) > 0 for t in later)


def close_answered(draft: SummaryDraft, later: Iterable[str]) -> SummaryDraft:
    """``draft`` with each open question ``later`` answers moved to its facts. A text that
    could answer several closes only those it names best: the billing client's timeout,
    not the orders client's, when it says "billing"."""
    texts = [_words(t) for t in later if SETTLED.search(t)]
    questions = draft.unresolved_questions
    if not texts or not questions:
        return draft
    counts = Counter(w for q in questions for w in _words(q.statement))
    n = len(questions)
    common = frozenset(w for w, k in counts.items() if n > 2 and k > COMMON * n)
    telling = [_telling(q.statement, common) for q in questions]
    done: set[int] = set()
    for text in texts:
        scores = [_named(t, text) for t in telling]
        best = max(scores)
        done.update(k for k, v in enumerate(scores) if best > 0 and v == best)
    still = [q for k, q in enumerate(questions) if k not in done]
    closed = [
        dataclasses.replace(q, statement=f"answered later: {q.statement}")
        for k, q in enumerate(questions)
        if k in done
    ]
    if not closed:
        return draft
    return dataclasses.replace(
        draft,
        verified_facts=(*draft.verified_facts, *closed),
        unresolved_questions=tuple(still),
    )
