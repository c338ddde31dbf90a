"""The soak's verdict (benchmarks/soak_check.py) must see what it claims to see: each
kind of damage, planted in otherwise clean rows, is found — and clean rows pass."""

from __future__ import annotations

from collections import Counter
from typing import Any

from benchmarks.soak_chaos import plan
from benchmarks.soak_check import check_compaction, check_records, next_summary_after

S = "soak-s000"


def rec(seq: int, key: str, kind: str = "user_input", **kw: Any) -> dict[str, Any]:
    row = {
        "session_id": S,
        "event_key": key,
        "session_sequence": seq,
        "run_id": "r0",
        "instance_id": "r0.main",
        "instance_sequence": seq,
        "kind": kind,
        "operation_id": None,
        "purpose": None,
        "main": True,
    }
    return row | kw


def clean() -> dict[str, list[dict[str, Any]]]:
    return {
        "records": [
            rec(1, "run_started:r0", "run_started"),
            rec(2, "q0"),
            rec(3, "model:a", "assistant_message", operation_id="a", purpose="action"),
        ],
        "sessions": [
            {"session_id": S, "next_session_sequence": 4, "user_turns": 1, "model_steps": 1}
        ],
        "threads": [
            {"session_id": S, "run_id": "r0", "instance_id": "r0.main", "next_instance_sequence": 4}
        ],
        "outcomes": [],
    }


KEYS = {S: {"run_started:r0", "q0", "model:a"}}


def test_clean_rows_pass() -> None:
    r = check_records(clean(), KEYS, KEYS)
    assert (r["acknowledged"], r["lost"], r["duplicated"], r["never_sent"]) == (3, 0, 0, 0)
    assert (r["sequence_gaps"], r["counter_drift"]) == (0, 0)


def test_lost_and_never_sent() -> None:
    rows = clean()
    rows["records"][1]["event_key"] = "q-ghost"  # q0 is missing, q-ghost was never sent
    rows["outcomes"] = [{"session_id": S, "event_key": "q0", "outcome": "x", "code": "dl"}]
    r = check_records(rows, KEYS, KEYS)
    assert (r["lost"], r["never_sent"]) == (1, 1)
    assert r["lost_examples"] == [f"{S}/q0 (dl)"]


def test_duplicates_gaps_and_drift() -> None:
    rows = clean()
    rows["records"].append(
        rec(5, "model:a", "assistant_message", operation_id="a", purpose="action")
    )
    rows["sessions"][0]["next_session_sequence"] = 6
    r = check_records(rows, KEYS, KEYS)
    assert r["duplicated"] == 2  # once by key, once by (operation_id, kind)
    assert r["sequence_gaps"] > 0  # 4 is missing in the session and in the thread
    assert r["counter_drift"] == 1  # two action messages in the records, one counted


def test_model_calls_repeated_from_the_logs() -> None:
    jobs = [{"job_id": "j1", "status": "committed", "op_status": "x", "model_calls": 1}]
    once = ["job j1: succeeded at save (None) calls=1 covered=9 tokens -> summary 3 tokens"]
    assert check_compaction(jobs, once)["model_calls_repeated"] == 0
    assert check_compaction(jobs, once * 2)["model_calls_repeated"] == 1
    republished = [*once, "job j1: republishing the saved outcome (no model call)"]
    c = check_compaction(jobs, republished)
    assert (c["model_calls_repeated"], c["republished_from_saved"]) == (0, 1)
    assert check_compaction(jobs, [])["model_calls_repeated"] is None  # no evidence


def test_next_summary_and_plan() -> None:
    jobs = [{"saved_at": 100.0}, {"saved_at": 107.5}, {"saved_at": None}]
    assert next_summary_after(jobs, 100.0, 5.0) == 7.5
    assert next_summary_after(jobs, 200.0, 1.0) is None
    assert Counter(plan(3)) == {
        "processor": 3, "prepare": 3, "compaction": 3, "kafka": 1, "postgres": 1
    }  # fmt: skip
