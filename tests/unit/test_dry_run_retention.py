"""The settings page's dry run follows the draft's retention rules (issue 28, R10.1, R17):
records the rules keep verbatim are never shown as summarized."""

from __future__ import annotations

import pytest

from domain.policy.context_policy import effective_policy
from domain.preview.dry_run import dry_run
from tests.unit.test_console_draft import COUNTERS, RECORDS


def _actions(retention: dict[str, str]) -> dict[str, str]:
    policy, _ = effective_policy(
        {
            "recent_complete_groups": 1,
            "compaction": {"user_turns": 4},
            "retention_rules": retention,
        }
    )
    run = dry_run(RECORDS, frozenset(), policy, COUNTERS, 1_000, 100_000)
    return {r.record_id: r.action for r in run.records}


@pytest.mark.spec("R10.1", "R17")
@pytest.mark.parametrize("value", ["active", "required"])
def test_a_retention_change_changes_what_the_dry_run_would_summarize(value: str) -> None:
    default = _actions({})
    kept = _actions({"tool_results": value})
    # One run: its tool outcomes are tool_results (r3, r12, r22 are in the old prefix);
    # kept verbatim, the large r12 is shown as a view (R10.3).
    assert [default[i] for i in ("r3", "r12", "r22")] == ["summarize"] * 3
    assert [kept[i] for i in ("r3", "r12", "r22")] == ["keep", "externalize", "keep"]
    # A tool group is one unit: its call stays verbatim with its result (R5.1).
    assert kept["r2"] == "keep" and default["r2"] == "summarize"
    assert _actions({"tool_results": "optional"}) == default
