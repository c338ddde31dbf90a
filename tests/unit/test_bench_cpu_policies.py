"""``benchmarks.agents`` reports the scheduling policy each of its process groups ran
under (``benchmarks.proc_cpu.cpu_policies``), so that a figure says what it measured."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks.proc_cpu import Groups, cpu_policies


def test_each_groups_policy_is_read_from_its_processes() -> None:
    batch = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        preexec_fn=lambda: os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)),
    )
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        g = Groups({"svc": {batch.pid}, "sdk": {os.getpid()}, "both": {batch.pid, os.getpid()}})
        g.pids["left"] = {gone.pid}
        policies = cpu_policies(g)
    finally:
        batch.kill()
        batch.wait()
    mine = {os.SCHED_OTHER: "normal", os.SCHED_BATCH: "batch"}[os.sched_getscheduler(0)]
    assert policies == {
        "svc": "batch",
        "sdk": mine,
        "both": "+".join(sorted({"batch", mine})),
        "left": "gone",
    }
