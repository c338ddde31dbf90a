"""``agentloom serve`` as a user runs it: one command brings up every service, prints the
URLs and a dev host key, a prepare goes through it, Ctrl-C stops everything (exit 0);
a service killed under it stops the others (exit 1)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from streams.kafka.auth import read_credentials
from tests.support.responses_server import responses_server
from tests.support.services import free_port, services_env
from tests.support.stack import REPO, Stack

pytestmark = pytest.mark.integration
SERVICES = ("prepare", "processor", "compaction", "analytics", "console")


@dataclass
class Serve:
    popen: subprocess.Popen[bytes]
    lines: list[str] = field(default_factory=list)

    def follow(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                m = re.match(pattern, line)
                if m:
                    return m
            if self.popen.poll() is not None and not any(re.match(pattern, x) for x in self.lines):
                break
            time.sleep(0.2)
        raise AssertionError(f"no line {pattern!r}; output:\n" + "\n".join(self.lines[-80:]))

    def pids(self) -> dict[str, int]:
        line = self.wait_for(r"\[serve\]   pids (.*)", 1).group(1)
        return {k: int(v) for k, v in (pair.split("=") for pair in line.split())}

    def exports(self) -> dict[str, str]:
        line = self.wait_for(r"export (.*)", 1).group(1)
        return dict(pair.split("=", 1) for pair in line.split())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes (its parent has not reaped it yet).
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


@pytest.fixture
def serve_env(stack: Stack, pg_dsn: str) -> dict[str, str]:
    env = services_env(stack, pg_dsn)
    env["ALC_ANALYTICS_GROUP"] = f"alc-test-analytics-{uuid.uuid4().hex[:8]}"
    return env


def start_serve(env: dict[str, str], *args: str) -> Serve:
    popen = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "serve", *args],
        env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        start_new_session=True,  # its own group: the SIGINT below is a terminal's Ctrl-C
    )
    serve = Serve(popen)
    threading.Thread(target=serve.follow, daemon=True).start()
    return serve


@pytest.fixture
def serving(serve_env: dict[str, str], stack: Stack, tmp_path: Path) -> Iterator[Serve]:
    """``serve`` with the test's names and ports; killed (group) if a test left it up."""
    prepare_port = serve_env["ALC_PREPARE_PORT"]
    metrics = free_port(3)
    # The stack's own set-up runs where the tests' stack is ours (deploy/stack.sh).
    stack_flag = "--stack" if stack.source == "deploy-scripts" else "--no-stack"
    serve = start_serve(
        serve_env,
        stack_flag,
        f"--prepare-port={prepare_port}",
        f"--console-port={free_port()}",
        f"--metrics-port={metrics}",
        f"--key-file={tmp_path / 'dev-key'}",
    )
    try:
        yield serve
    finally:
        if serve.popen.poll() is None:
            os.killpg(serve.popen.pid, signal.SIGKILL)
            serve.popen.wait(10)
        for pid in serve_pids(serve):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def serve_pids(serve: Serve) -> list[int]:
    try:
        return list(serve.pids().values())
    except AssertionError:
        return []


def readme_example() -> str:
    """The README's runtime SDK example, as a newcomer copies it into a file."""
    text = (REPO / "README.md").read_text("utf-8")
    block = text[text.index("```python\n", text.index("## Runtime SDK")) + len("```python\n") :]
    return block[: block.index("```\n")]


def run_as_a_newcomer(
    exports: dict[str, str], where: Path, script: str, **more: str
) -> subprocess.CompletedProcess[str]:
    """``script`` in a directory outside the repository, with serve's export line (and
    ``more``, what the README says to export besides) as its only configuration: no ALC_*
    of the test stack, no state directory."""
    where.mkdir()
    (where / "example.py").write_text(script)
    env = {"PATH": os.environ["PATH"], "HOME": str(where), **exports, **more}
    return subprocess.run(
        [sys.executable, "example.py"],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def agents_example_runs_as_a_newcomer(exports: dict[str, str], where: Path) -> None:
    """The Agents SDK example, copied out of the repository, against a scripted Responses
    model: three questions, each answered from the tool's output, and the third model
    call sees the first two questions' tool outputs through our prepared context."""
    example = (REPO / "examples" / "openai_agents_session.py").read_text("utf-8")
    with responses_server() as (model_url, model):
        done = run_as_a_newcomer(
            exports,
            where,
            example,
            OPENAI_BASE_URL=model_url,
            OPENAI_API_KEY="sk-scripted",
            OPENAI_AGENTS_DISABLE_TRACING="1",  # the README's line for a non-OpenAI model
        )
    assert done.returncode == 0, done.stdout + done.stderr
    for table in ("t1", "t2"):
        assert f"The tool said: {table}: row0=0" in done.stdout, done.stdout
    assert "items in the prepared context" in done.stdout
    last_question = next(r for r in model.requests if "Which one" in json.dumps(r["input"]))
    seen = json.dumps(last_question["input"])
    assert "t1: row0=0" in seen and "t2: row0=0" in seen, seen


@pytest.mark.timeout(300)
def test_serve_runs_every_service_prepares_and_stops_on_ctrl_c(
    serving: Serve, tmp_path: Path
) -> None:
    serving.wait_for(r"export ALC_PREPARE_URL=", 240)
    pids = serving.pids()
    assert set(pids) == set(SERVICES)
    urls = {
        name: m.group(1)
        for name in ("prepare", "console")
        if (m := serving.wait_for(rf"\[serve\]   {name} +(http://\S+)", 1))
    }
    metrics = re.findall(r"metrics +(\w+) (http://\S+)", "\n".join(serving.lines))
    assert {name for name, _ in metrics} == {"processor", "compaction", "analytics"}
    for url in [urls["prepare"] + "/healthz", urls["console"] + "/healthz"] + [
        u for _, u in metrics
    ]:
        assert httpx.get(url, timeout=5).status_code == 200, url
    # Every service's own output reaches serve's, prefixed with its name.
    for name in SERVICES:
        assert any(line.startswith(f"[{name}] ") for line in serving.lines), name

    exports = serving.exports()
    assert exports["ALC_PREPARE_URL"] == urls["prepare"]
    # The broker login the line points at is the runtime's alone; no password on the line.
    logins = read_credentials(Path(exports["ALC_KAFKA_CREDENTIALS_FILE"]))
    assert list(logins) == ["runtime"]
    assert not any(pw in " ".join(exports.values()) for pw in logins.values())
    done = run_as_a_newcomer(exports, tmp_path / "elsewhere", readme_example())
    assert done.returncode == 0, done.stdout + done.stderr
    assert " messages; " in done.stdout
    agents_example_runs_as_a_newcomer(exports, tmp_path / "agents")

    os.killpg(serving.popen.pid, signal.SIGINT)  # Ctrl-C at the terminal
    assert serving.popen.wait(90) == 0, "\n".join(serving.lines[-40:])
    assert [name for name, pid in pids.items() if alive(pid)] == []
    assert serving.lines[-1] == "[serve] stopped"


@pytest.mark.timeout(300)
def test_a_killed_service_stops_the_others_and_serve_fails(serving: Serve) -> None:
    serving.wait_for(r"export ALC_PREPARE_URL=", 240)
    pids = serving.pids()
    os.kill(pids["compaction"], signal.SIGKILL)
    assert serving.popen.wait(90) == 1, "\n".join(serving.lines[-40:])
    died = serving.wait_for(r"\[serve\] (compaction exited with code -9.*)", 1).group(1)
    assert "stopping the others" in died
    assert [name for name, pid in pids.items() if alive(pid)] == []
