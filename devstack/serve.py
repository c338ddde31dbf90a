"""``agentloom serve`` (``make serve``): the local stack and every service in the foreground.

Starts Kafka + PostgreSQL (``deploy/stack.sh up``, idempotent), provisions the broker's
users and ACLs for the configured names (``streams.kafka.provision``), then Prepare, the
session processor, the compaction and analytics services and the console as OS
processes through their real entry points (``devstack.launcher``), each line of their
output printed with the service's name in front. Once all are ready it prints, once,
the URLs, a dev host key (kept in ``.state/dev-host-key`` and reused while it is live)
and the ``export`` line the examples and the SDK read.

Ctrl-C or SIGTERM stops the services and exits 0; Kafka and PostgreSQL keep running
(``make down`` stops them). A service that exits on its own stops the others and serve
exits 1, naming it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Annotated

import asyncpg
import typer

from devstack.launcher import Proc, ServiceSet, service_set
from domain.auth import KeyKind, host_key, key_id_of, verify
from schemas.settings import Settings
from services.console.settings import ConsoleSettings
from storage import api_keys
from storage.roles import role_dsn
from streams.kafka.auth import credentials_path, kafka_auth
from streams.kafka.bus_secrets import issuer_secret
from streams.kafka.provision import provision

REPO = Path(__file__).resolve().parents[1]
# The local single-broker stack's partition count (the Makefile's ALC_TOPIC_PARTITIONS);
# the library default (24) is sized for production.
DEV_PARTITIONS = "4"
# Processor, compaction, analytics: their Prometheus ports, from --metrics-port on.
METRICS_SERVICES = ("processor", "compaction", "analytics")


class Stopped(Exception):
    """SIGINT or SIGTERM arrived: stop the services, exit 0."""


class ServiceDied(Exception):
    """A service exited on its own (or did not start): stop the others, exit 1."""


def parse_env_lines(text: str) -> dict[str, str]:
    """``KEY=value`` lines (``deploy/stack.sh``'s env file); blanks and comments skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def serve_env(
    environ: Mapping[str, str],
    stack_env: Mapping[str, str],
    prepare_port: int,
    console_port: int,
) -> dict[str, str]:
    """The services' environment: the stack's connection settings under what the caller
    set (an ALC_* of the caller wins), the dev partition count, the ports, and the
    console pointed at this Prepare and database."""
    env = {**stack_env, **environ}
    env.setdefault("ALC_TOPIC_PARTITIONS", DEV_PARTITIONS)
    env["ALC_PREPARE_PORT"] = str(prepare_port)
    host = env.get("ALC_PREPARE_HOST", "127.0.0.1")
    env["ALC_CONSOLE_PORT"] = str(console_port)
    env["ALC_CONSOLE_PREPARE_URL"] = f"http://{host}:{prepare_port}"
    if "ALC_PG_DSN" in env:
        env["ALC_CONSOLE_PG_DSN"] = console_dsn(env)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def runtime_credentials_path(settings: Settings) -> Path:
    """Where serve keeps the ``runtime`` principal's login alone (absolute: the export
    line works from any directory)."""
    return credentials_path(settings).resolve().parent / "runtime.env"


def write_runtime_credentials(settings: Settings) -> None:
    """The runtime's broker login, and nothing else (never admin's, nor another
    service's), in its own file (mode 0600) for the agents the export line starts."""
    auth = kafka_auth(settings, "runtime")
    if not auth.sasl:  # a broker without authentication: nothing to write
        return
    path = runtime_credentials_path(settings)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(f"# the runtime principal only (agentloom serve)\nruntime={auth.password}\n")


def console_dsn(env: Mapping[str, str]) -> str:
    """The console's database DSN: its own login when the stack gives each process its
    own (``ALC_PG_ROLE_LOGINS``, storage/roles.py)."""
    dsn = env["ALC_PG_DSN"]
    logins = env.get("ALC_PG_ROLE_LOGINS", "").lower() in ("1", "true", "yes", "on")
    return role_dsn(dsn, "console") if logins else dsn


def export_line(settings: Settings, prepare_url: str, key: str, space: str) -> str:
    """What the SDK, the integrations and the examples read (``AgentLoomConnection``,
    ``streams.kafka.auth``): the URLs, the dev host key and its space, and the broker
    login of the runtime principal as a file path (no password on the line)."""
    pairs = {
        "ALC_PREPARE_URL": prepare_url,
        "ALC_API_KEY": key,
        "ALC_SPACE_ID": space,
        "ALC_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "ALC_TOPIC_RECORDS": settings.topic_records,
        "ALC_KAFKA_SECURITY_PROTOCOL": settings.kafka_security_protocol,
    }
    if settings.kafka_security_protocol != "PLAINTEXT":
        pairs["ALC_KAFKA_CREDENTIALS_FILE"] = str(runtime_credentials_path(settings))
    cafile = (
        kafka_auth(settings, "runtime").cafile
        if settings.kafka_security_protocol == "SASL_SSL"
        else None
    )
    if cafile:
        pairs["ALC_KAFKA_SSL_CAFILE"] = str(Path(cafile).resolve())
    return "export " + " ".join(f"{k}={v}" for k, v in pairs.items())


def banner(
    settings: Settings,
    console_port: int | None,
    metrics_ports: Mapping[str, int],
    key: str,
    key_note: str,
    space: str,
    pids: Mapping[str, int],
) -> list[str]:
    """The lines printed once every service is ready."""
    prepare = f"http://{settings.prepare_host}:{settings.prepare_port}"
    lines = [
        "ready: Ctrl-C stops every service (Kafka and PostgreSQL keep running;"
        " `make down` stops them)",
        f"  prepare    {prepare}  (API {prepare}/docs, health /healthz, metrics /metrics)",
    ]
    if console_port is not None:
        lines.append(
            f"  console    http://{settings.prepare_host}:{console_port}  (sign in with the key)"
        )
    lines.append(f"  analytics  {prepare}/v1/analytics/rollups?window=1h  (with the key)")
    for name, port in metrics_ports.items():
        lines.append(f"  metrics    {name} http://127.0.0.1:{port}/metrics")
    lines.append(f"  dev host key of space {space} ({key_note}): {key}")
    lines.append("  pids " + " ".join(f"{name}={pid}" for name, pid in pids.items()))
    lines.append("for the examples and your own agent (another shell):")
    lines.append(export_line(settings, prepare, key, space))
    return lines


async def dev_key(dsn: str, space: str, path: Path, issuer: bytes) -> tuple[str, str]:
    """The host key of ``space`` stored at ``path`` while it is live in this database
    and issued under ``issuer`` (the key issuer secret: else it signs nothing the
    processor accepts), else a new one (written there, mode 0600). Returns (key, how it
    was had)."""
    stored = path.read_text().strip() if path.exists() else ""
    key_id = key_id_of(stored)
    conn = await asyncpg.connect(dsn)
    try:
        found = await api_keys.find_key(conn, key_id) if key_id else None
        live = (
            found is not None
            and verify(stored, found.digest)
            and found.credential.space_id == space
            and found.credential.kind is KeyKind.HOST
            and key_id is not None
            and host_key(key_id, issuer).key == stored
        )
        if live:
            return stored, f"reused from {path}"
        issued = await api_keys.create_key(
            conn, space, KeyKind.HOST, label="agentloom serve", issuer=issuer
        )
    finally:
        await conn.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(issued.key + "\n")
    return issued.key, f"new, kept in {path}"


class Printer:
    """Whole lines to stdout from any thread, each with its source in front."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def line(self, source: str, text: str) -> None:
        with self._lock:
            sys.stdout.write(f"[{source}] {text}\n")
            sys.stdout.flush()

    def raw(self, text: str) -> None:
        with self._lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    def to(self, source: str) -> Callable[[str], None]:
        return lambda text: self.line(source, text)


def build_services(
    env: dict[str, str],
    settings: Settings,
    log_dir: Path,
    metrics_ports: Mapping[str, int],
    printer: Printer,
    with_console: bool,
) -> tuple[ServiceSet, list[Proc]]:
    """The five services, streaming to ``printer``, each in its own process group (a
    Ctrl-C reaches serve alone, which stops them in order). Returns the set and every
    process in start order."""
    python = sys.executable
    procs = service_set(env, log_dir, REPO, settings.prepare_host, settings.prepare_port, python)
    assert procs.analytics is not None
    started = [procs.prepare, procs.processor, procs.compaction, procs.analytics]
    if with_console:
        port = env["ALC_CONSOLE_PORT"]
        started.append(
            Proc(
                "console",
                [python, "-m", "services.console"],
                env,
                log_dir,
                health_url=f"http://{settings.prepare_host}:{port}/healthz",
                cwd=REPO,
            )
        )
    for proc in started:
        proc.echo = printer.to(proc.name)
        proc.own_group = True
        if proc.name in metrics_ports:
            proc.env = {**env, "ALC_METRICS_PORT": str(metrics_ports[proc.name])}
    return procs, started


def stop_all(procs: ServiceSet, started: Sequence[Proc]) -> None:
    """The console first, then the set in its own order (Prepare before the consumers)."""
    for proc in started:
        if proc not in (procs.prepare, procs.processor, procs.compaction, procs.analytics):
            proc.stop()
    procs.stop()


def watch(started: Sequence[Proc], poll_s: float = 0.5) -> None:
    """Until a signal (``Stopped``) or a service's own exit (``ServiceDied``)."""
    while True:
        for proc in started:
            assert proc.popen is not None
            code = proc.popen.poll()
            if code is not None:
                raise ServiceDied(f"{proc.name} exited with code {code}; log {proc.log_path}")
        time.sleep(poll_s)


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    # Once: a second Ctrl-C while the services stop does not interrupt their stopping.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Stopped(signal.Signals(signum).name)


def stack_up(printer: Printer) -> dict[str, str]:
    """``deploy/stack.sh up`` (its output streamed), then the env lines it wrote."""
    script = REPO / "deploy" / "stack.sh"
    if not script.exists():
        raise ServiceDied(f"no {script}: start Kafka and PostgreSQL yourself and pass --no-stack")
    with subprocess.Popen(
        ["bash", str(script), "up"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            printer.raw(raw.decode(errors="replace").rstrip("\n"))  # its own [stack] etc.
    if proc.returncode != 0:
        raise ServiceDied(f"deploy/stack.sh up exited {proc.returncode}")
    return read_stack_env()


def read_stack_env() -> dict[str, str]:
    state = Path(os.environ.get("ALC_STATE_DIR", REPO / ".state"))
    env_file = state / "stack.env"
    return parse_env_lines(env_file.read_text()) if env_file.exists() else {}


def metrics_ports_of(base: int) -> dict[str, int]:
    return {} if base == 0 else {n: base + i for i, n in enumerate(METRICS_SERVICES)}


@dataclass(frozen=True)
class Options:
    prepare_port: int
    console_port: int
    metrics_port: int
    console: bool
    stack: bool
    space: str
    key_file: Path


Running = list[tuple[ServiceSet, list[Proc]]]


def start(opts: Options, printer: Printer, running: Running) -> list[Proc]:
    """The stack, the broker's ACLs, every service (ready), the dev key, the banner."""
    stack_env = stack_up(printer) if opts.stack else read_stack_env()
    env = serve_env(os.environ, stack_env, opts.prepare_port, opts.console_port)
    os.environ.update(env)  # Settings() here reads what the services read
    settings = Settings()
    asyncio.run(provision(settings))
    log_dir = REPO / ".state" / "logs" / f"serve-{time.strftime('%Y%m%d-%H%M%S')}"
    ports = metrics_ports_of(opts.metrics_port)
    procs, started = build_services(env, settings, log_dir, ports, printer, opts.console)
    running.append((procs, started))
    printer.line("serve", f"starting {', '.join(p.name for p in started)} (logs in {log_dir})")
    for proc in started:
        proc.start()
    issuer = issuer_secret(settings)
    key, note = asyncio.run(dev_key(settings.pg_dsn, opts.space, opts.key_file, issuer))
    write_runtime_credentials(settings)
    pids = {p.name: p.popen.pid for p in started if p.popen is not None}
    cport = opts.console_port if opts.console else None
    *lines, export = banner(settings, cport, ports, key, note, opts.space, pids)
    for text in lines:
        printer.line("serve", text)
    printer.raw(export)  # copied whole into another shell
    return started


def run(opts: Options) -> int:
    """Start, watch, stop: 0 after SIGINT/SIGTERM, 1 when a service failed."""
    printer = Printer()
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    running: Running = []
    try:
        watch(start(opts, printer, running))
    except Stopped as stop:
        printer.line("serve", f"{stop}: stopping the services")
        code = 0
    except Exception as exc:  # a service that died or did not start, the stack, the database
        printer.line("serve", f"{exc}; stopping the others")
        code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for procs, started in running:
            stop_all(procs, started)
    printer.line("serve", "stopped" + (" (a service failed)" if code else ""))
    return code


app = typer.Typer(add_completion=False)


@app.command()
def serve(
    prepare_port: Annotated[
        int, typer.Option(help="Prepare's port (ALC_PREPARE_PORT)")
    ] = Settings.model_fields["prepare_port"].default,
    console_port: Annotated[
        int, typer.Option(help="the console's port (ALC_CONSOLE_PORT)")
    ] = ConsoleSettings.model_fields["port"].default,
    metrics_port: Annotated[
        int,
        typer.Option(help="Prometheus ports of processor, compaction, analytics: N..N+2; 0 off"),
    ] = 18091,
    console: Annotated[bool, typer.Option(help="start the web console")] = True,
    stack: Annotated[
        bool, typer.Option(help="run deploy/stack.sh up first (--no-stack: it already runs)")
    ] = True,
    space: Annotated[str, typer.Option(help="the tenant space of the dev host key")] = "default",
    key_file: Annotated[
        Path, typer.Option(help="where the dev host key is kept between runs")
    ] = REPO / ".state" / "dev-host-key",
) -> None:
    """Run the local stack and every service in the foreground; Ctrl-C stops them."""
    opts = Options(prepare_port, console_port, metrics_port, console, stack, space, key_file)
    raise typer.Exit(run(opts))


def main() -> None:
    app(prog_name="agentloom serve")


if __name__ == "__main__":
    main()
