"""Authored decisions and questions (issue 36): their payload rules (dead-letter codes)
and their entries in a summary (``domain.compaction.authored``): verbatim, cited, first
in their section, closed only by a ``question_closed`` that names them."""

from __future__ import annotations

import pytest

from domain.compaction.authored import (
    authored_entries,
    close_questions,
    keep_recorded,
    recorded_questions,
    with_recorded,
)
from domain.compaction.drafts import RECORDED, Fact, SourceItem, SummaryDraft
from schemas.contracts import Content, DecisionPayload, QuestionPayload, RecordKind
from schemas.errors import InvalidEvent
from schemas.payload_rules import MAX_DECISION_BYTES
from schemas.validation import validate_event
from tests.unit.factories import make_event


def _code(**kw: object) -> str:
    with pytest.raises(InvalidEvent) as info:
        validate_event(make_event(**kw))  # type: ignore[arg-type]
    return info.value.reason_code


# --- validation -------------------------------------------------------------------------


def test_valid_authored_records_pass() -> None:
    validate_event(make_event(RecordKind.DECISION_RECORDED, text="Use PostgreSQL."))
    validate_event(make_event(RecordKind.DECISION_RECORDED, payload=DecisionPayload()))
    validate_event(make_event(RecordKind.QUESTION_OPENED, "q:1", text="Which port?"))
    validate_event(
        make_event(RecordKind.QUESTION_CLOSED, "c:1", payload=QuestionPayload("q:1"), text="")
    )


@pytest.mark.parametrize(
    ("kw", "code"),
    [
        ({"kind": RecordKind.DECISION_RECORDED, "text": "  "}, "bad_decision"),
        (
            {"kind": RecordKind.DECISION_RECORDED, "text": "x" * (MAX_DECISION_BYTES + 1)},
            "bad_decision",
        ),
        (
            {"kind": RecordKind.DECISION_RECORDED, "payload": DecisionPayload("é" * 3000)},
            "bad_decision",
        ),
        ({"kind": RecordKind.QUESTION_OPENED, "text": ""}, "bad_question"),
        (
            {"kind": RecordKind.QUESTION_OPENED, "payload": QuestionPayload("another-key")},
            "bad_question",
        ),
        (
            {"kind": RecordKind.QUESTION_OPENED, "payload": QuestionPayload("k1", "already")},
            "bad_question",
        ),
        ({"kind": RecordKind.QUESTION_CLOSED, "payload": QuestionPayload("k1")}, "bad_question"),
        ({"kind": RecordKind.QUESTION_CLOSED, "payload": QuestionPayload("")}, "bad_question"),
        (
            {"kind": RecordKind.QUESTION_CLOSED, "payload": QuestionPayload("q", "a" * 5000)},
            "bad_question",
        ),
        ({"kind": RecordKind.QUESTION_CLOSED, "payload": QuestionPayload("q\x01")}, "bad_id"),
        ({"kind": RecordKind.DECISION_RECORDED, "run": None}, "bad_scope"),
    ],
    ids=lambda v: str(v)[:40],
)
@pytest.mark.spec("R3.3")
def test_bad_authored_records_are_refused_with_a_code(kw: dict[str, object], code: str) -> None:
    assert _code(**kw) == code


def test_a_decision_by_reference_is_refused() -> None:
    ev = make_event(RecordKind.DECISION_RECORDED, content=Content.reference("a" * 64, 70_000))
    with pytest.raises(InvalidEvent) as info:
        validate_event(ev)
    assert info.value.reason_code == "bad_decision"


# --- entries ----------------------------------------------------------------------------


def _item(rid: str, kind: str, text: str = "", key: str = "", detail: str = "") -> SourceItem:
    seq = int(rid.rsplit("-", 1)[1])
    return SourceItem(rid, seq, kind, "user", text, question_key=key, detail=detail)


ZH_QUESTION = "谁检查架构\uff1f"  # a CJK question mark
ITEMS = (
    _item("r-1", "user_input", "Set up the store."),
    _item("r-2", "decision_recorded", "Use PostgreSQL,\nnot SQLite.", detail="row locks"),
    _item("r-3", "question_opened", "Which port does staging use?", key="q:port"),
    _item("r-4", "question_opened", ZH_QUESTION, key="q:schema"),
    _item("r-5", "decision_recorded", "采用方案二。"),
)


@pytest.mark.spec("R11.7")
def test_authored_items_become_verbatim_cited_recorded_entries() -> None:
    d = authored_entries(ITEMS)
    assert [(f.statement, f.source_ids, f.origin) for f in d.decisions] == [
        ("Use PostgreSQL,\nnot SQLite. (reason: row locks)", ("r-2",), RECORDED),
        ("采用方案二。", ("r-5",), RECORDED),
    ]
    assert [(f.statement, f.key) for f in d.unresolved_questions] == [
        ("Which port does staging use?", "q:port"),
        (ZH_QUESTION, "q:schema"),
    ]
    assert d.verified_facts == () and d.failures == ()
    assert "- Use PostgreSQL, not SQLite. (reason: row locks) [r-2]" in d.text()


@pytest.mark.spec("R11.7")
def test_only_a_closing_that_names_the_key_closes_a_question() -> None:
    d = authored_entries(ITEMS)
    # Text that sounds like an answer closes nothing.
    said = _item("r-6", "user_input", "Port 5432, resolved.")
    assert close_questions(d, [said]) == d
    assert close_questions(d, [_item("r-7", "question_closed", key="q:unknown")]) == d
    closed = close_questions(d, [_item("r-8", "question_closed", key="q:port", detail="5432")])
    assert [f.key for f in recorded_questions(closed)] == ["q:schema"]
    (answered,) = closed.verified_facts
    assert answered.statement == "Which port does staging use? — answered: 5432"
    assert answered.source_ids == ("r-3", "r-8") and answered.recorded
    no_answer = close_questions(d, [_item("r-9", "question_closed", key="q:schema")])
    assert no_answer.verified_facts[0].statement == f"{ZH_QUESTION} — closed"


def _summarizer_draft() -> SummaryDraft:
    return SummaryDraft(
        verified_facts=(Fact("The user wants a store.", ("r-1",)),),
        decisions=(
            Fact("PostgreSQL was chosen", ("r-2",)),  # a restatement: dropped
            Fact("Chose PostgreSQL after the user asked", ("r-1", "r-2")),  # more: kept
        ),
        failures=(),
        unresolved_questions=(Fact("What port?", ("r-3",)),),
        work_artifact_refs=(),
        observations=(),
    )


@pytest.mark.spec("R11.7")
def test_with_recorded_puts_recorded_entries_first_and_drops_restatements() -> None:
    merged = with_recorded(_summarizer_draft(), ITEMS)
    assert [f.statement for f in merged.decisions] == [
        "Use PostgreSQL,\nnot SQLite. (reason: row locks)",
        "采用方案二。",
        "Chose PostgreSQL after the user asked",
    ]
    assert [f.statement for f in merged.unresolved_questions] == [
        "Which port does staging use?",
        ZH_QUESTION,
    ]
    assert merged.verified_facts == (Fact("The user wants a store.", ("r-1",)),)


@pytest.mark.spec("R11.7", "R11.8")
def test_recorded_entries_survive_roll_ups_and_are_closed_in_a_later_job() -> None:
    first = with_recorded(_summarizer_draft(), ITEMS)
    stored = first.to_dict()
    # A later job: the parent as stored; a summarizer (or an answer rule) mangled the
    # parent's entries; the new segment closes one question.
    mangled = SummaryDraft(
        verified_facts=(Fact("Port is known", ("r-3",)),),
        decisions=(Fact("postgres", ("r-2",), RECORDED),),
        failures=(),
        unresolved_questions=(),
        work_artifact_refs=(),
        observations=("n",),
    )
    later = (
        _item("r-10", "assistant_message", "Checking."),
        _item("r-11", "question_closed", key="q:port", detail="5432"),
    )
    second = with_recorded(mangled, later, stored)
    assert [f.statement for f in second.decisions] == [
        "Use PostgreSQL,\nnot SQLite. (reason: row locks)",
        "采用方案二。",
    ]
    assert [f.statement for f in second.unresolved_questions] == [ZH_QUESTION]
    assert second.verified_facts[0].statement == ("Which port does staging use? — answered: 5432")
    assert second.verified_facts[0].source_ids == ("r-3", "r-11")
    assert second.observations == ("n",)
    # a roll-up that drops or rewords them: restored verbatim, first
    rolled = SummaryDraft((Fact("port 5432", ("r-3", "r-11")),), (), (), (), (), ())
    kept = keep_recorded(second, rolled)
    assert [f.statement for f in kept.all_facts()] == [
        f.statement for f in second.all_facts() if f.recorded
    ]
    assert keep_recorded(SummaryDraft((), (), (), (), (), ()), rolled) == rolled


def test_origin_and_key_round_trip_and_old_summaries_still_parse() -> None:
    fact = Fact("Which port?", ("r-3",), RECORDED, "q:port")
    assert fact.to_dict() == {
        "statement": "Which port?",
        "source_ids": ["r-3"],
        "origin": "recorded",
        "key": "q:port",
    }
    assert Fact("plain", ("r-1",)).to_dict() == {"statement": "plain", "source_ids": ["r-1"]}
    draft = SummaryDraft((), (), (), (fact,), (), ())
    assert SummaryDraft.from_dict(draft.to_dict()) == draft
    old = {
        name: [{"statement": "x", "source_ids": ["r"]}]
        for name in ("verified_facts", "decisions", "failures", "unresolved_questions")
    }
    parsed = SummaryDraft.from_dict(old)
    assert all(f.origin == "" and f.key == "" for f in parsed.all_facts())
