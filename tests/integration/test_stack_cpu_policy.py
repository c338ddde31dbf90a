"""The stack our deploy scripts start runs PostgreSQL and the broker under SCHED_BATCH
(``ALC_STACK_CPU``, deploy/cpu-policy.sh), as our services run
(streams/tuning/cpu_policy.py): a process woken by a message or a statement does not
preempt the one that woke it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import asyncpg
import pytest

from tests.support.stack import REPO, Stack


def _from_scripts(stack: Stack) -> None:
    if stack.source != "deploy-scripts":  # a container's or a named stack's policy is theirs
        pytest.skip(f"stack from {stack.source}, not from deploy/")


def _expected(pid: int) -> tuple[int, str]:
    want = os.SCHED_OTHER if os.environ.get("ALC_STACK_CPU") == "normal" else os.SCHED_BATCH
    why = f"process {pid}: a stack started before ALC_STACK_CPU? deploy/stack.sh down, then up"
    return want, why


async def test_postgresql_backends_run_under_sched_batch(stack: Stack) -> None:
    _from_scripts(stack)
    conn = await asyncpg.connect(stack.pg_dsn)
    try:
        pid = await conn.fetchval("SELECT pg_backend_pid()")  # forked by the postmaster
        policy = os.sched_getscheduler(pid)
    finally:
        await conn.close()
    want, why = _expected(pid)
    assert policy == want, why


def test_the_broker_runs_under_sched_batch(stack: Stack) -> None:
    _from_scripts(stack)
    state = Path(os.environ.get("ALC_STATE_DIR") or REPO / ".state")
    pid = int((state / "kafka" / "kafka.pid").read_text().split()[0])
    want, why = _expected(pid)
    assert os.sched_getscheduler(pid) == want, why


def _prefix(**env: str) -> str:
    script = f"source {REPO / 'deploy' / 'cpu-policy.sh'}; cpu_policy_prefix"
    return subprocess.run(
        ["bash", "-c", script], env={**os.environ, **env}, capture_output=True, text=True
    ).stdout.strip()


def test_alc_stack_cpu_normal_starts_the_servers_as_scheduled() -> None:
    assert _prefix(ALC_STACK_CPU="normal") == ""
    assert _prefix(ALC_STACK_CPU="batch") == "chrt -b 0"
