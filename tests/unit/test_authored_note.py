"""Authored records in Prepare's thread view (issue 36): a decision, an open question
(with its key, so that the model can close it) and a closing are short state notes in
their place in the history — never an instruction, never left out of the view."""

from __future__ import annotations

from domain.authority import DERIVED_ROLE
from domain.context.rendering import RecordView, ThreadRenderer


def _rec(seq: int, kind: str, text: str, payload: dict[str, object]) -> RecordView:
    return RecordView(f"r{seq}", seq, "run-1", "main", kind, "model", text, payload, 5)


def test_authored_records_render_as_state_notes_in_their_place() -> None:
    r = ThreadRenderer(lambda s: len(s) // 4 + 1)
    closing: dict[str, object] = {"question_key": "question:c1", "answer": "9093"}
    r.feed(_rec(1, "user_input", "Pick a store.", {"intent": "question"}), False)
    r.feed(_rec(2, "decision_recorded", "PostgreSQL over SQLite.", {"reason": "locks"}), False)
    r.feed(_rec(3, "question_opened", "Which port?", {"question_key": "question:c1"}), False)
    r.feed(_rec(4, "question_closed", "9093", closing), False)
    notes = [(m["role"], m["block"], m["content"], m["record_ids"]) for m in r.messages[1:]]
    decided = "[state: decision recorded] PostgreSQL over SQLite. (reason: locks)"
    assert notes == [
        (DERIVED_ROLE, "state", decided, ["r2"]),
        (DERIVED_ROLE, "state", "[state: open question, key question:c1] Which port?", ["r3"]),
        (DERIVED_ROLE, "state", "[state: question question:c1 closed: 9093]", ["r4"]),
    ]
    assert [v.record_id for v in r.records] == ["r1", "r2", "r3", "r4"]  # compaction candidates
