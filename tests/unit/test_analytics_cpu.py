"""The analytics process yields the CPU to the core path (issue 12, R18): its policy is
applied in a child process here, since a scheduling policy cannot be undone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = (
    "import os; from services.analytics.__main__ import yield_cpu; yield_cpu({policy!r}); "
    "print(os.sched_getscheduler(0), os.nice(0))"
)


def _apply(policy: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(policy=policy)],
        check=True,
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    ).stdout.split()
    return int(out[0]), int(out[1])


@pytest.mark.spec("R18")
def test_idle_runs_analytics_only_on_cpu_nobody_else_wants() -> None:
    assert _apply("idle")[0] == os.SCHED_IDLE


@pytest.mark.spec("R18")
def test_low_lowers_its_priority_and_normal_keeps_it() -> None:
    base = os.nice(0)
    assert _apply("low") == (os.SCHED_OTHER, min(19, base + 10))
    assert _apply("normal") == (os.SCHED_OTHER, base)
