"""Each service's CPU scheduling policy (``streams.tuning.cpu_policy``): applied in a child
process here, since a policy cannot be undone; and set by every entry point from its
settings."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import os; from streams.tuning.cpu_policy import apply_cpu_policy; "
    "apply_cpu_policy({policy!r}); print(os.sched_getscheduler(0), os.nice(0))"
)


def _apply(policy: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(policy=policy)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
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


def test_batch_puts_a_service_in_sched_batch_at_its_priority() -> None:
    assert _apply("batch") == (os.SCHED_BATCH, os.nice(0))


ENTRY_POINTS = {
    "services/prepare/__main__.py": "settings.service_cpu",
    "services/compaction/__main__.py": "settings.service_cpu",
    "streams/bootstrap.py": "settings.service_cpu",  # the processor (its child inherits it)
    "services/analytics/__main__.py": "settings.analytics_cpu",
}


@pytest.mark.parametrize("path", ENTRY_POINTS)
def test_every_service_applies_its_policy_from_its_settings_at_start(path: str) -> None:
    tree = ast.parse((ROOT / path).read_text("utf-8"))
    calls = [
        ast.unparse(n)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "apply_cpu_policy"
    ]
    assert calls == [f"apply_cpu_policy({ENTRY_POINTS[path]})"], calls


def test_the_processors_worker_inherits_its_parents_policy() -> None:
    """A policy is kept across fork and exec (no SCHED_RESET_ON_FORK): the offloaded
    child, started by the processor, runs under the processor's."""
    code = (
        "import os, subprocess, sys; from streams.tuning.cpu_policy import apply_cpu_policy; "
        "apply_cpu_policy('batch'); "
        "print(subprocess.run([sys.executable, '-c', 'import os; print(os.sched_getscheduler(0))'],"
        " capture_output=True, text=True).stdout.strip())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT
    )
    assert int(out.stdout) == os.SCHED_BATCH
