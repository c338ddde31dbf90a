"""A session's authored records for the inspector (issue 36): the decisions recorded and
the questions opened, each with its closing if one came — what the web console's session
page and ``agentloom session inspect`` show. Read only; retracted records are left out.

``fold`` (pure) pairs each question with the first closing that names its key; a closing
that names no question of the session is listed apart, never dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import asyncpg
from pydantic import JsonValue

from storage.records.retraction import live_sql

KINDS = ("decision_recorded", "question_opened", "question_closed")


@dataclass(frozen=True)
class Decision:
    record_id: str
    session_sequence: int
    run_id: str | None
    authority: str
    text: str
    reason: str | None


@dataclass(frozen=True)
class Question:
    record_id: str
    session_sequence: int
    run_id: str | None
    authority: str
    key: str
    text: str
    closed_by: str | None = None  # the closing record
    answer: str | None = None

    @property
    def status(self) -> str:
        return "open" if self.closed_by is None else "closed"


@dataclass(frozen=True)
class Authored:
    decisions: tuple[Decision, ...] = ()
    questions: tuple[Question, ...] = ()
    unmatched_closings: tuple[str, ...] = field(default=())  # record ids

    @property
    def open_questions(self) -> tuple[Question, ...]:
        return tuple(q for q in self.questions if q.closed_by is None)

    def to_dict(self) -> dict[str, JsonValue]:
        """As the CLI prints it: the fields as JSON arrays, each question with its
        status."""
        return {
            "decisions": [asdict(d) for d in self.decisions],
            "questions": [asdict(q) | {"status": q.status} for q in self.questions],
            "unmatched_closings": list(self.unmatched_closings),
        }


def fold(rows: Iterable[Mapping[str, Any]]) -> Authored:
    """Rows (record_id, session_sequence, run_id, kind, authority, text, payload) in
    session order → the decisions and the questions with their status."""
    decisions: list[Decision] = []
    questions: dict[str, Question] = {}
    unmatched: list[str] = []
    for r in rows:
        p = r["payload"] or {}
        common = (r["record_id"], r["session_sequence"], r["run_id"], r["authority"])
        if r["kind"] == "decision_recorded":
            decisions.append(Decision(*common, r["text"] or "", p.get("reason")))
        elif r["kind"] == "question_opened":
            key = str(p.get("question_key") or "")
            questions.setdefault(key, Question(*common, key, r["text"] or ""))
        elif r["kind"] == "question_closed":
            q = questions.get(str(p.get("question_key") or ""))
            if q is None or q.closed_by is not None:
                unmatched.append(r["record_id"])
            else:
                questions[q.key] = replace(q, closed_by=r["record_id"], answer=p.get("answer"))
    return Authored(tuple(decisions), tuple(questions.values()), tuple(unmatched))


_SQL = (
    "SELECT r.record_id, r.session_sequence, r.run_id, r.kind, r.authority,"
    " r.content_inline AS text, r.payload FROM records r"
    f" WHERE r.session_id = $1 AND r.kind = ANY($2::text[]) AND {live_sql('r')}"
    " ORDER BY r.session_sequence"
)


async def session_authored(conn: asyncpg.Pool | asyncpg.Connection, session_id: str) -> Authored:
    rows = await conn.fetch(_SQL, session_id, list(KINDS))
    return fold({**dict(r), "payload": _json(r["payload"])} for r in rows)


def _json(value: Any) -> Any:
    # the pool decodes jsonb (a codec); a bare connection hands back its text
    return json.loads(value) if isinstance(value, str) else value
