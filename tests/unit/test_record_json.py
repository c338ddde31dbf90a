"""The JSON written from a record (``dataclasses.asdict``, issue 40 item 2) is what was
stored and printed before its TypedDict copy was folded: the ``last_attempt`` column reads
back as the record it was written from, and ``agentloom session inspect --json`` prints a
job and an open call with the same keys and values."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime

import orjson

from domain.compaction.triggers import Counters, LastAttempt
from storage.compaction.diagnostics import JobLine, OpenCall
from storage.compaction.summaries import last_attempt_of
from storage.records.authored import Authored, Decision, Question


def test_the_last_attempt_column_reads_back_as_written() -> None:
    attempt = LastAttempt("fp", 6_000, Counters(2, 5), 100_000, 4_000, rebuild="due")
    stored = orjson.loads(orjson.dumps(asdict(attempt)))  # as storage.pool writes jsonb
    assert stored == {
        "fingerprint": "fp",
        "compressible_tokens": 6_000,
        "counters": {"user_turns": 2, "model_steps": 5},
        "input_budget": 100_000,
        "required_tokens": 4_000,
        "rebuild": "due",
    }
    assert last_attempt_of(stored) == attempt
    assert last_attempt_of(None) is None


def test_a_job_and_an_open_call_print_as_before() -> None:
    at = datetime(2026, 12, 5, 5, 4, 53, 120_000, tzinfo=UTC)
    rules = [{"rule": "frame", "action": "framed", "field": "facts", "index": 0}]
    job = JobLine("cmp_1", "committed", "done", None, ["context_ratio"], at, rules)
    assert json.loads(json.dumps(job.to_dict())) == {
        "job_id": "cmp_1",
        "status": "committed",
        "stage": "done",
        "reason": None,
        "trigger_reasons": ["context_ratio"],
        "created_at": "2026-12-05T05:04:53.120000+00:00",
        "text_rules": rules,
    }
    call = OpenCall("c1", "search", "rec_1", None, 7, "in_flight")
    assert call.to_dict() == {
        "call_id": "c1",
        "tool": "search",
        "record_id": "rec_1",
        "run_id": None,
        "session_sequence": 7,
        "state": "in_flight",
    }


def test_authored_records_print_with_each_question_status() -> None:
    d = Decision("rec_d", 1, "run_1", "agent", "Use Postgres", None)
    q = Question("rec_q", 2, "run_1", "user", "store", "Which store?", "rec_c", "Postgres")
    got = Authored((d,), (q,), ("rec_x",)).to_dict()
    assert got == {
        "decisions": [asdict(d)],
        "questions": [asdict(q) | {"status": "closed"}],
        "unmatched_closings": ["rec_x"],
    }
