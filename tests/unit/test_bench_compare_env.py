"""``benchmarks.compare --env-before / --env-after``: a setting of one side only, in the
same alternating rounds as two commits (a setting measured by hand-run pairs read the
machine's drift as a gain, docs/scaling.md twentieth stop)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import compare


def test_each_side_runs_with_its_own_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str, dict[str, str] | None]] = []

    def measure(
        wt: Path, opts: dict[str, list[str]], tag: str, extra: dict[str, str] | None = None
    ) -> tuple[dict[str, float], list[str]]:
        seen.append((str(wt), tag, extra))
        return {"m": 1.0}, []

    monkeypatch.setattr(compare, "measure", measure)
    trees = {"before": Path("/b"), "after": Path("/a")}
    envs = {"before": {}, "after": {"ALC_PROCESSOR_BATCH_WITHIN_S": "1"}}
    runs, failures = compare.rounds(trees, {"agents": []}, 2, envs)
    assert seen == [
        ("/b", "r1-before", {}),
        ("/a", "r1-after", {"ALC_PROCESSOR_BATCH_WITHIN_S": "1"}),
        ("/b", "r2-before", {}),
        ("/a", "r2-after", {"ALC_PROCESSOR_BATCH_WITHIN_S": "1"}),
    ]
    assert len(runs["before"]) == len(runs["after"]) == 2 and failures == {
        "before": [],
        "after": [],
    }


def test_a_sides_setting_is_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALC_PROCESSOR_BATCH_WITHIN_S", "0.02")
    monkeypatch.setenv("ALC_TOPIC_PARTITIONS", "8")
    plain = compare._env(Path("/wt"))
    over = compare._env(Path("/wt"), {"ALC_PROCESSOR_BATCH_WITHIN_S": "1"})
    assert plain["ALC_PROCESSOR_BATCH_WITHIN_S"] == "0.02"
    assert over["ALC_PROCESSOR_BATCH_WITHIN_S"] == "1"
    assert over["PYTHONPATH"] == "/wt" and over["ALC_TOPIC_PARTITIONS"] == "8"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--gate", "--env-after", "ALC_X=1"], "--gate compares commits as they are"),
        (["a", "b", "--env-before", "ALC_X"], "not NAME=VALUE: 'ALC_X'"),
        (["a", "b", "--env-after", "=1"], "not NAME=VALUE: '=1'"),
    ],
)
def test_a_setting_the_gate_or_the_syntax_forbids_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, argv: list[str], said: str
) -> None:
    monkeypatch.setattr(sys, "argv", ["compare", *argv])
    monkeypatch.setattr(compare, "worktree", lambda sha: pytest.fail("nothing is checked out"))
    with pytest.raises(SystemExit) as done:
        compare.main()
    assert done.value.code == 2
    assert said in capsys.readouterr().err
