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


def _launched_by_deploy(**env: str) -> int:
    """The policy of a process started as deploy/ starts PostgreSQL and the broker: after
    ``cpu_policy_prefix``'s words (``ALC_STACK_CPU``)."""
    script = (
        f"source {ROOT / 'deploy' / 'cpu-policy.sh'}; exec $(cpu_policy_prefix) "
        f"{sys.executable} -c 'import os; print(os.sched_getscheduler(0))'"
    )
    out = subprocess.run(
        ["bash", "-c", script],
        env={k: v for k, v in os.environ.items() if k != "ALC_STACK_CPU"} | env,
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout)


def test_deploy_starts_a_server_under_sched_batch_unless_alc_stack_cpu_is_normal() -> None:
    assert _launched_by_deploy() == os.SCHED_BATCH
    assert _launched_by_deploy(ALC_STACK_CPU="batch") == os.SCHED_BATCH
    assert _launched_by_deploy(ALC_STACK_CPU="normal") == os.SCHED_OTHER


@pytest.mark.parametrize(
    ("script", "launch"),
    [
        ("deploy/kafka.sh", "exec setsid nohup $(cpu_policy_prefix) java "),
        ("deploy/postgres.sh", 'as_pg $(cpu_policy_prefix) "$PGBIN/pg_ctl" '),
    ],
)
def test_deploy_starts_postgresql_and_the_broker_through_the_policy(
    script: str, launch: str
) -> None:
    text = (ROOT / script).read_text("utf-8")
    assert 'source "$DEPLOY_DIR/cpu-policy.sh"' in text
    assert launch in text


def test_alc_service_cpu_decides_a_services_policy() -> None:
    """What each service's entry point applies (``apply_cpu_policy(settings.service_cpu)``,
    checked above) for each value of ``ALC_SERVICE_CPU``."""
    code = (
        "import os; from schemas.settings import Settings; "
        "from streams.tuning.cpu_policy import apply_cpu_policy; "
        "apply_cpu_policy(Settings().service_cpu); print(os.sched_getscheduler(0))"
    )

    def policy(value: str | None) -> int:
        env = {k: v for k, v in os.environ.items() if k != "ALC_SERVICE_CPU"}
        if value is not None:
            env["ALC_SERVICE_CPU"] = value
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        return int(out.stdout)

    assert policy(None) == os.SCHED_BATCH
    assert policy("normal") == os.SCHED_OTHER
