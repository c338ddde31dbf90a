"""``agentloom serve``'s pieces that need no services: its environment, what it prints,
and the launcher's line echo."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from devstack.launcher import Proc
from devstack.serve import (
    banner,
    export_line,
    metrics_ports_of,
    parse_env_lines,
    serve_env,
    write_runtime_credentials,
)
from schemas.settings import Settings
from services.integrations.connection import AgentLoomConnection


def test_env_lines_parse_like_the_stack_writes_them() -> None:
    text = "# stack\nALC_KAFKA_BOOTSTRAP=127.0.0.1:19092\n\nALC_PG_DSN=postgresql://a@h:1/d\n"
    assert parse_env_lines(text) == {
        "ALC_KAFKA_BOOTSTRAP": "127.0.0.1:19092",
        "ALC_PG_DSN": "postgresql://a@h:1/d",
    }


def test_the_callers_settings_win_over_the_stacks() -> None:
    stack = {"ALC_PG_DSN": "postgresql://stack/db", "ALC_KAFKA_BOOTSTRAP": "k:1"}
    env = serve_env({"ALC_PG_DSN": "postgresql://mine/db"}, stack, 28080, 28090)
    assert env["ALC_PG_DSN"] == "postgresql://mine/db"
    assert env["ALC_KAFKA_BOOTSTRAP"] == "k:1"
    # The console reads this Prepare and this database; the dev stack's partition count.
    assert env["ALC_CONSOLE_PREPARE_URL"] == "http://127.0.0.1:28080"
    assert env["ALC_CONSOLE_PG_DSN"] == "postgresql://mine/db"
    assert (env["ALC_PREPARE_PORT"], env["ALC_CONSOLE_PORT"]) == ("28080", "28090")
    assert env["ALC_TOPIC_PARTITIONS"] == "4"
    assert serve_env({"ALC_TOPIC_PARTITIONS": "8"}, {}, 1, 2)["ALC_TOPIC_PARTITIONS"] == "8"


def test_metrics_ports_follow_the_base_or_are_off() -> None:
    assert metrics_ports_of(0) == {}
    assert metrics_ports_of(18091) == {"processor": 18091, "compaction": 18092, "analytics": 18093}


async def test_the_export_line_is_what_the_integrations_read(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """From any directory: the runtime's broker login is a file of its own (absolute
    path), never admin's, and no password is on the line."""
    users = tmp_path / "secrets" / "kafka-users.env"
    users.parent.mkdir()
    users.write_text("admin=admin-pw\nprepare=prepare-pw\nruntime=runtime-pw\n")
    settings = Settings(
        kafka_bootstrap="k:9", topic_records="t.records", kafka_credentials_file=str(users)
    )
    write_runtime_credentials(settings)
    line = export_line(settings, "http://127.0.0.1:28080", "alc_x_y", "dev")
    assert line.startswith("export ") and "-pw" not in line
    pairs = dict(p.split("=", 1) for p in line.removeprefix("export ").split())
    runtime_file = Path(pairs["ALC_KAFKA_CREDENTIALS_FILE"])
    assert runtime_file.is_absolute() and "admin" not in runtime_file.read_text()
    assert runtime_file.stat().st_mode & 0o077 == 0
    for name in [k for k in os.environ if k.startswith("ALC_")]:
        monkeypatch.delenv(name)
    for key, value in pairs.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)  # not the repository
    conn = AgentLoomConnection.from_env()
    assert conn.space_id == "dev"
    client = conn._make()  # the client the examples' sessions get
    assert str(client.http.base_url).rstrip("/") == "http://127.0.0.1:28080"
    assert client.http.headers["Authorization"] == "Bearer alc_x_y"
    kafka = client.producer.publisher.producer.client  # aiokafka's, as configured
    assert (kafka._sasl_plain_username, kafka._sasl_plain_password) == ("runtime", "runtime-pw")
    await client.http.aclose()


def test_the_banner_names_every_url_the_key_and_the_pids() -> None:
    settings = Settings(prepare_port=28080)
    lines = banner(settings, 28090, {"processor": 28091}, "alc_k", "new", "default", {"prepare": 7})
    text = "\n".join(lines)
    for part in (
        "http://127.0.0.1:28080",
        "http://127.0.0.1:28090",
        "/v1/analytics/rollups",
        "processor http://127.0.0.1:28091/metrics",
        "alc_k",
        "pids prepare=7",
        "make down",
    ):
        assert part in text
    assert lines[-1].startswith("export ALC_PREPARE_URL=http://127.0.0.1:28080 ALC_API_KEY=alc_k")
    no_console = banner(settings, None, {}, "alc_k", "new", "default", {})
    assert not any("console" in line for line in no_console)


def test_the_launcher_echoes_every_line_once_the_last_without_newline(tmp_path: Path) -> None:
    seen: list[str] = []
    lock = threading.Lock()

    def echo(line: str) -> None:
        with lock:
            seen.append(line)

    script = "import time\nfor i in range(50): print('line', i, flush=True)\ntime.sleep(0.3)\n"
    script += "print('last', end='', flush=True)\n"
    proc = Proc("p", [sys.executable, "-c", script], {}, tmp_path, ready_line="line 0", echo=echo)
    proc.start(timeout=30)
    assert proc.popen is not None
    proc.popen.wait(30)
    for _ in range(100):
        with lock:
            if seen and seen[-1] == "last":
                break
        threading.Event().wait(0.05)
    assert seen == [f"line {i}" for i in range(50)] + ["last"]
    assert proc.log_path.read_text().endswith("last")  # the log file is as before


def test_own_group_puts_the_process_in_its_own_session(tmp_path: Path) -> None:
    proc = Proc(
        "g",
        [sys.executable, "-c", "import os, time; print(os.getsid(0), flush=True); time.sleep(5)"],
        {},
        tmp_path,
        ready_line="\n",
        own_group=True,
    )
    proc.start(timeout=30)
    assert proc.popen is not None
    try:
        sid = int(proc.log_path.read_text().split()[0])
        assert sid == proc.popen.pid  # a session leader: a terminal's Ctrl-C misses it
    finally:
        proc.stop()
    assert proc.popen.returncode is not None
