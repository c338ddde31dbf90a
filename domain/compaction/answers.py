"""Open questions the later history closes (R11.7), by structure. Pure.

A question the summary holds open (an assistant's question at the end of its segment,
``extractive``) is open only until the next user message: the user answered it or moved
on — in whatever words, in whatever language. No word decides it ("resolved", "yes, go
ahead", "是的" alike), so a restated question or a doubt that mentions being resolved
closes nothing, and an answer in any language does. The entry then moves to the facts
as "asked earlier: …": history keeps that it was asked, and the open list keeps the
questions still open.

An entry the author recorded (``origin == "recorded"``: ``question_opened``) is open
until its own ``question_closed`` record, never closed here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from domain.compaction.drafts import SummaryDraft

# One thing said, and when: (record id, session sequence, text[, record kind]). Without
# the kind, nothing tells a user's turn: nothing closes.
Said = tuple[str, int, str] | tuple[str, int, str, str]
USER_KINDS = frozenset({"user_input", "supplement"})
CLOSED_PREFIX = "asked earlier: "


def user_turns(later: Iterable[Said]) -> list[int]:
    """The sequences of the user's messages among ``later``."""
    return [s[1] for s in later if len(s) > 3 and s[3] in USER_KINDS]


def close_answered(draft: SummaryDraft, later: Iterable[Said]) -> SummaryDraft:
    """``draft`` with each open question that a later user message follows moved to its
    facts (``CLOSED_PREFIX``). A question asked within ``later`` is closed only by a
    user message after it; one of an earlier summary by any of them."""
    records = list(later)
    turns = user_turns(records)
    questions = draft.unresolved_questions
    if not turns or not questions:
        return draft
    at = {s[0]: s[1] for s in records}  # where the new segments' questions were asked
    last_turn = max(turns)
    still, closed = [], []
    for q in questions:
        asked = max((at.get(i, -1) for i in q.source_ids), default=-1)
        if not q.recorded and last_turn > asked:
            closed.append(dataclasses.replace(q, statement=f"{CLOSED_PREFIX}{q.statement}"))
        else:
            still.append(q)
    if not closed:
        return draft
    return dataclasses.replace(
        draft,
        verified_facts=(*draft.verified_facts, *closed),
        unresolved_questions=tuple(still),
    )
