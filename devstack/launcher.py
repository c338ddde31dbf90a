"""Start our processes (processor, Prepare) as separate OS processes through their real
entry points, wait until each is ready, stop them cleanly. Used by the demo, the
benchmarks and the integration tests."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

# Logged by both processor drivers once consuming: faust's "[^Worker]: Ready" and the
# direct driver's "[direct-driver]: Ready".
PROCESSOR_READY = "]: Ready"
COMPACTION_READY = "[compaction]: Ready"
ANALYTICS_READY = "[analytics]: Ready"


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_dir: Path
    ready_line: str | None = None
    health_url: str | None = None
    cwd: Path | None = None
    popen: subprocess.Popen[bytes] | None = None
    log_path: Path = field(default_factory=Path)
    starts: int = 0
    # Each line of the output, as it reaches the log file, also goes here (``agentloom
    # serve`` prints it prefixed with the name); None: the log file only.
    echo: Callable[[str], None] | None = None
    # Its own session (process group): a Ctrl-C at the terminal reaches only the parent,
    # which stops the process with ``stop``.
    own_group: bool = False

    def start(self, timeout: float = 90.0) -> None:
        """Start and wait for readiness: a log line, or a health URL answering 200."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.log_path = self.log_dir / f"{self.name}-{self.starts}.log"
        with self.log_path.open("wb") as log:
            self.popen = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                start_new_session=self.own_group,
            )
        if self.echo is not None:
            follow = threading.Thread(
                target=_follow,
                args=(self.log_path, self.popen, self.echo),
                name=f"follow-{self.name}",
                daemon=True,
            )
            follow.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited {self.popen.returncode}; log "
                    f"{self.log_path}:\n{self.tail()}"
                )
            if self._ready():
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"{self.name} not ready in {timeout}s; log {self.log_path}:\n{self.tail()}"
        )

    def tail(self, n: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-n:]

    def _ready(self) -> bool:
        if self.ready_line is not None:
            return self.ready_line in self.log_path.read_text(errors="replace")
        assert self.health_url is not None
        try:
            return httpx.get(self.health_url, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def kill9(self) -> None:
        assert self.popen is not None
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def stop(self) -> None:
        """SIGTERM (faust and uvicorn shut down cleanly and leave the group), then kill."""
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(20)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)


def _follow(path: Path, popen: subprocess.Popen[bytes], echo: Callable[[str], None]) -> None:
    """Hand each complete line of ``path`` to ``echo`` as it is written, until the process
    has exited and the file is read to its end (a last line without newline included)."""
    pending = b""
    with path.open("rb") as f:
        while True:
            chunk = f.read(65536)
            if chunk:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    echo(line.decode(errors="replace"))
                continue
            if popen.poll() is not None:  # what it wrote before exiting, then stop
                for line in (pending + f.read()).splitlines():
                    echo(line.decode(errors="replace"))
                return
            time.sleep(0.1)


@dataclass
class ServiceSet:
    """Our three processes, started in dependency order: Prepare applies migrations and
    creates the topics, so the processor and the compaction service join their groups
    with the partitions already there. Each still checks every topic it uses at start and
    exits (``streams.kafka.topics.EXIT_TOPICS``) if one differs; ``Proc.start`` then raises
    with the log's tail."""

    prepare: Proc
    processor: Proc
    compaction: Proc
    # Off the core path (its own consumer group): started on request — the demo does, the
    # integration tests start it only where they test it, to keep their start-up short.
    analytics: Proc | None = None

    def start(self, with_compaction: bool = True, with_analytics: bool = False) -> None:
        self.prepare.start()
        self.processor.start()
        if with_compaction:
            self.compaction.start()
        if with_analytics and self.analytics is not None:
            self.analytics.start()

    def stop(self) -> None:
        if self.analytics is not None:
            self.analytics.stop()
        self.prepare.stop()
        self.compaction.stop()
        self.processor.stop()


def service_set(
    env: dict[str, str],
    log_dir: Path,
    cwd: Path,
    prepare_host: str,
    prepare_port: int | str,
    python: str,
    suffix: str = "",
) -> ServiceSet:
    """``suffix`` names a second, third... set of the same services (``processor-2``), so
    that several instances of a process can log side by side in ``log_dir``."""

    def proc(name: str, module: str, **ready: str) -> Proc:
        argv = [python, "-m", module]
        return Proc(name + suffix, argv, env, log_dir, cwd=cwd, **ready)  # type: ignore[arg-type]

    return ServiceSet(
        prepare=proc(
            "prepare",
            "services.prepare",
            health_url=f"http://{prepare_host}:{prepare_port}/healthz",
        ),
        processor=proc("processor", "streams", ready_line=PROCESSOR_READY),
        compaction=proc("compaction", "services.compaction", ready_line=COMPACTION_READY),
        analytics=proc("analytics", "services.analytics", ready_line=ANALYTICS_READY),
    )
