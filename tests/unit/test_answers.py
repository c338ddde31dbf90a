# ruff: noqa: RUF001  (CJK full-width punctuation is what these tests are about)
"""Open questions the later history closes (R11.7): by structure — a user message after
the question — never by what some text says."""

from __future__ import annotations

import pytest

from domain.compaction.answers import CLOSED_PREFIX, Said, close_answered
from domain.compaction.drafts import RECORDED, Fact, SummaryDraft
from domain.compaction.sources import merge_drafts

QUESTIONS = (
    "Which timeout does the billing client use in production?",
    "要不要也更新文档？",
)


def _draft(*questions: Fact) -> SummaryDraft:
    return SummaryDraft((Fact("read src/a.py", ("rec_9",)),), (), (), questions, (), ())


def _open(*texts: str) -> tuple[Fact, ...]:
    return tuple(Fact(q, (f"rec_{n}",)) for n, q in enumerate(texts))


@pytest.mark.spec("R11.7")
@pytest.mark.parametrize("reply", ["Yes, go ahead", "是的", "Oui, vas-y.", "Let's look at logs."])
def test_a_user_message_after_the_question_closes_it_whatever_it_says(reply: str) -> None:
    later: list[Said] = [("rec_a", 10, reply, "user_input")]
    out = close_answered(_draft(*_open(*QUESTIONS)), later)
    assert not out.unresolved_questions
    closed = [f for f in out.verified_facts if f.statement.startswith(CLOSED_PREFIX)]
    assert [f.source_ids for f in closed] == [("rec_0",), ("rec_1",)]


@pytest.mark.spec("R11.7")
@pytest.mark.parametrize(
    "text",
    [
        "Resolved: the billing client timeout is 30 s.",
        "It is unclear whether the billing timeout was resolved.",
        "Which timeout does the billing client use in production? Still resolved? No.",
    ],
)
def test_what_the_assistant_says_never_closes_a_question(text: str) -> None:
    later: list[Said] = [("rec_a", 10, text, "assistant_message")]
    out = close_answered(_draft(*_open(*QUESTIONS)), later)
    assert [f.statement for f in out.unresolved_questions] == list(QUESTIONS)


@pytest.mark.spec("R11.7")
def test_only_a_user_message_after_a_new_question_closes_it() -> None:
    asked = Fact("Should I open a PR?", ("rec_5",))
    before: list[Said] = [("rec_4", 4, "Fix it", "user_input"), ("rec_5", 5, "Should I?", "x")]
    assert close_answered(_draft(asked), before).unresolved_questions == (asked,)
    after = [*before, ("rec_6", 6, "No.", "supplement")]
    assert not close_answered(_draft(asked), after).unresolved_questions


@pytest.mark.spec("R11.7")
def test_a_recorded_question_stays_open_until_its_own_closing() -> None:
    recorded = Fact("Does merge run before backfill?", ("rec_1",), RECORDED, "q1")
    out = close_answered(_draft(recorded), [("rec_a", 10, "Yes.", "user_input")])
    assert out.unresolved_questions == (recorded,)


def test_without_the_kind_nothing_closes() -> None:
    out = close_answered(_draft(*_open(*QUESTIONS)), [("rec_a", 10, "Yes, go ahead")])
    assert len(out.unresolved_questions) == 2


def test_the_merge_closes_what_a_later_user_message_follows() -> None:
    parent = _draft(*_open(QUESTIONS[0])).to_dict()
    new = _draft(Fact("Is the cache shared?", ("rec_7",)))
    later: list[Said] = [("rec_6", 6, "Use 30 s.", "user_input"), ("rec_7", 7, "…?", "x")]
    out = merge_drafts(parent, [new], later)
    assert [q.statement for q in out.unresolved_questions] == ["Is the cache shared?"]
