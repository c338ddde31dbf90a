"""R8.4 / R11.6: when a compaction result may be committed."""

from __future__ import annotations

import dataclasses

import pytest

from domain.commit import Candidate, Dependencies, budget_after, decide_commit, to_verify

CURRENT = Dependencies("sum_1", "pol_a", 3)
GOOD = Candidate(
    "sum_1",
    "pol_a",
    3,
    summary_tokens=200,
    covered_tokens=5_000,
    summary_empty=False,
    covered_records_missing=0,
)


@pytest.mark.spec("R11.6")
def test_matching_versions_and_real_reduction_commit() -> None:
    assert decide_commit(CURRENT, GOOD).commit is True


@pytest.mark.spec("R8.4", "R11.6", "R15.3")
@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"parent_summary_id": "sum_0"}, "version_conflict:parent_summary"),
        ({"policy_revision": "pol_b"}, "version_conflict:policy"),
        ({"task_version": 2}, "version_conflict:task"),
        ({"summary_tokens": 5_000}, "no_real_reduction"),
        ({"summary_empty": True}, "empty_summary"),
        ({"covered_records_missing": 1}, "covered_records_missing"),
        ({"covered_records_revoked": 2}, "version_conflict:resource_revoked"),
    ],
)
def test_no_commit_and_so_no_baseline_move(change: dict[str, object], reason: str) -> None:
    d = decide_commit(CURRENT, dataclasses.replace(GOOD, **change))  # type: ignore[arg-type]
    assert (d.commit, d.reason) == (False, reason)


def test_budget_after_subtracts_covered_and_adds_summary() -> None:
    assert budget_after(90_000, 40_000, 1_500) == 51_500


@pytest.mark.spec("R15.3")
def test_only_the_records_the_current_parent_does_not_cover_are_looked_for() -> None:
    parent = ("rec_1", "rec_2", "rec_3")
    covered = ["rec_1", "rec_2", "rec_3", "rec_4", "rec_9"]
    # extending the current summary: its records were looked for when it was committed
    assert to_verify(covered, "sum_1", "sum_1", parent) == ["rec_4", "rec_9"]
    # another parent than the current summary, or none: every record
    assert to_verify(covered, "sum_0", "sum_1", parent) == covered
    assert to_verify(covered, None, "sum_1", parent) == covered
    assert to_verify(covered, None, None, ()) == covered
