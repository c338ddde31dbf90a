"""Open questions the later history answers (R11.7): closed, never a different one."""

from __future__ import annotations

import asyncio

import pytest

from domain.compaction.answers import answered, close_answered
from domain.compaction.bound import rollup_items
from domain.compaction.drafts import Fact, SummaryDraft, SummaryRequest
from domain.compaction.sources import merge_drafts
from services.compaction.extractive import ExtractiveSummarizer

QUESTIONS = (
    "Open question: which timeout does the billing client use in production?",
    "Open question: which timeout does the orders client use in production?",
    "TODO: find out whether the orders validator retries on TypeError.",
    "TODO: find out whether the orders adapter retries on TypeError.",
)


def _draft(questions: tuple[str, ...]) -> SummaryDraft:
    qs = tuple(Fact(q, (f"rec_{n}",)) for n, q in enumerate(questions))
    return SummaryDraft((Fact("read src/a.py", ("rec_9",)),), (), (), qs, (), ())


@pytest.mark.spec("R11.7")
def test_an_answered_question_moves_to_the_facts_and_a_similar_one_stays_open() -> None:
    later = [
        (
            "rec_a",
            10,
            "About the earlier point (which timeout does the billing client use):"
            " answered, it is 30 s.",
        ),
        ("rec_b", 11, "The orders adapter turns out to retry on TypeError twice."),
    ]
    out = close_answered(_draft(QUESTIONS), later)
    assert [q.statement for q in out.unresolved_questions] == [QUESTIONS[1], QUESTIONS[2]]
    closed = [f for f in out.verified_facts if f.statement.startswith("answered later: ")]
    assert [f.source_ids for f in closed] == [("rec_0",), ("rec_3",)]


def test_naming_a_question_without_settling_it_keeps_it_open() -> None:
    assert not answered(QUESTIONS[0], ["Still looking at the billing client timeout."])
    assert answered(QUESTIONS[0], ["Resolved: the billing client timeout is 30 s."])


def test_the_merge_closes_what_the_new_segments_answer() -> None:
    parent = _draft(QUESTIONS[:1]).to_dict()
    new = _draft(QUESTIONS[2:3])
    out = merge_drafts(
        parent, [new], [("rec_a", 5, "Answered: the billing client timeout is 30 s.")]
    )
    assert [q.statement for q in out.unresolved_questions] == [QUESTIONS[2]]


@pytest.mark.spec("R11.4", "R11.7")
def test_a_roll_up_keeps_the_newest_decisions_even_when_an_old_record_also_asked() -> None:
    """An old record cited by a decision and by an open question: the decision is still
    ranked by its place among the decisions, so the newest ones are kept first."""
    decisions = tuple(
        Fact(f"We decided to use pkg{i} instead of lib{i} for the part{i} loader.", (f"rec_{i}",))
        for i in range(40)
    )
    asked = (Fact("Open question: which ttl does the part0 loader use?", ("rec_0",)),)
    facts = tuple(
        Fact(f"src/m{i}.py: read {i * 7} rows in {i} ms", (f"rec_{100 + i}",)) for i in range(40)
    )
    draft = SummaryDraft(facts, decisions, (), asked, (), ())
    req = SummaryRequest(rollup_items(draft), None, 1200, "op")
    out = asyncio.run(ExtractiveSummarizer().summarize(req)).draft
    kept = {f.source_ids[0] for f in out.decisions}
    assert {f"rec_{i}" for i in range(35, 40)} <= kept
    assert "rec_0" not in kept


def test_settled_text_about_something_else_never_closes_a_question() -> None:
    q = "Open question: which timeout does the billing client use?"
    assert not answered(q, ["Confirmed: the billing client builds fine in CI."])


@pytest.mark.spec("R11.7")
def test_a_question_never_closes_itself_nor_on_a_denied_or_asked_answer() -> None:
    q = "Still unclear whether the retry fix resolved the flaky upload test."
    own = close_answered(_draft((q,)), [("rec_0", 3, f"Patched src/upload.py. {q}")])
    assert [f.statement for f in own.unresolved_questions] == [q]  # its own record
    webhook = "Still unclear whether the payment webhook is idempotent."
    for text in (
        "I have not confirmed whether the payment webhook is idempotent.",
        "Is the payment webhook idempotent? Not resolved yet.",
        "We still haven't figured out if the payment webhook is idempotent.",
    ):
        assert not answered(webhook, [text]), text
    assert answered(webhook, ["Confirmed: the payment webhook is idempotent."])
