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

from domain.compaction.drafts import SummaryDraft

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


# One thing said, by whom and when: (record id, session sequence, text).
Said = tuple[str, int, str]
# "not resolved", "haven't figured out", "still unconfirmed …": a settling word denied.
_DENIED = re.compile(
    r"\b(?:not|never|no|yet to be|still|n't)\W+(?:\w+\W+){0,2}?"
    r"(?:answered|resolved|settled|confirmed|figured|found)\b|n't\s+(?:been\s+)?"
    r"(?:answered|resolved|settled|confirmed|figured|found)\b",
    re.I,
)
_SENTENCE = re.compile(r"(?<=[.;!?])\s+|\n")


def settling(text: str) -> list[set[str]]:
    """The words of each sentence of ``text`` that says something is settled: not a
    question, and no settling word in it denied."""
    out = []
    for sentence in _SENTENCE.split(text):
        s = sentence.strip()
        if s and SETTLED.search(s) and not s.endswith("?") and not _DENIED.search(s):
            out.append(_words(s))
    return out


def answered(question: str, later: Iterable[str], common: frozenset[str] = frozenset()) -> bool:
    telling = _telling(question, common)
    return any(_named(telling, words) > 0 for t in later for words in settling(t))


def close_answered(draft: SummaryDraft, later: Iterable[Said]) -> SummaryDraft:
    """``draft`` with each open question a record after its own settles moved to its
    facts. A sentence that could answer several closes only those it names best: the
    billing client's timeout, not the orders client's, when it says "billing"."""
    records = list(later)
    said = [(seq, words) for _, seq, t in records for words in settling(t)]
    questions = draft.unresolved_questions
    if not said or not questions:
        return draft
    at = {rid: seq for rid, seq, _ in records}  # where the new segments' questions were asked
    counts = Counter(w for q in questions for w in _words(q.statement))
    n = len(questions)
    common = frozenset(w for w, k in counts.items() if n > 2 and k > COMMON * n)
    telling = [_telling(q.statement, common) for q in questions]
    asked = [max((at.get(i, -1) for i in q.source_ids), default=-1) for q in questions]
    done: set[int] = set()
    for seq, words in said:
        scores = [_named(t, words) if seq > asked[k] else 0.0 for k, t in enumerate(telling)]
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
