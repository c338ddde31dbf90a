"""Where the tests' Kafka and PostgreSQL come from — chosen automatically, and logged.

Order: services named by environment variables (ALC_TEST_KAFKA_BOOTSTRAP and
ALC_TEST_PG_DSN) → testcontainers when a Docker engine answers → our own
``deploy/stack.sh`` (real broker from Maven jars, Debian PostgreSQL). A service that
cannot be had is a test failure, never a skip — in CI and everywhere else.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("tests.stack")
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Stack:
    kafka_bootstrap: str
    pg_dsn: str
    source: str  # env | testcontainers | deploy-scripts
    # The broker's authentication settings (ALC_KAFKA_SECURITY_PROTOCOL, the credentials
    # file, the bus secrets directory), as deploy/stack.sh prints them; a broker
    # without authentication (testcontainers) has ALC_KAFKA_SECURITY_PROTOCOL=PLAINTEXT.
    auth_env: tuple[tuple[str, str], ...] = ()

    @property
    def env(self) -> dict[str, str]:
        """What a process (or ``Settings``) needs to reach this stack."""
        return {"ALC_KAFKA_BOOTSTRAP": self.kafka_bootstrap, "ALC_PG_DSN": self.pg_dsn} | dict(
            self.auth_env
        )


_AUTH_VARS = ("ALC_KAFKA_SECURITY_PROTOCOL", "ALC_KAFKA_CREDENTIALS_FILE", "ALC_KAFKA_SSL_")
_AUTH_VARS += ("ALC_BUS_", "ALC_KEY_ISSUER_", "ALC_PG_ROLE_LOGINS")


class StackUnavailable(RuntimeError):
    pass


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=8).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextmanager
def _testcontainers() -> Iterator[Stack]:
    from testcontainers.kafka import KafkaContainer
    from testcontainers.postgres import PostgresContainer

    with ExitStack() as stack:
        kafka = stack.enter_context(
            KafkaContainer("apache/kafka:4.1.1")
            .with_kraft()
            # Like deploy/kafka.sh: no topic is created on first use (streams/kafka/topics.py).
            .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
        )
        pg = stack.enter_context(PostgresContainer("postgres:15", driver=None))
        dsn = pg.get_connection_url()
        plain = (("ALC_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT"),)
        yield Stack(kafka.get_bootstrap_server(), dsn, "testcontainers", plain)


def _deploy_scripts() -> Stack:
    # One `stack.sh up` at a time: each pytest-xdist worker resolves the stack, and two
    # starting it at once on a fresh machine would both start PostgreSQL and Kafka.
    lock_path = REPO / ".state" / "stack-up.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.run(
            ["bash", str(REPO / "deploy" / "stack.sh"), "up"],
            capture_output=True,
            text=True,
            timeout=600,
        )
    if proc.returncode != 0:
        raise StackUnavailable(
            f"deploy/stack.sh up failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
            f"{proc.stderr[-3000:]}"
        )
    env = {}
    for line in proc.stdout.splitlines():
        if line.startswith("ALC_") and "=" in line:
            k, v = line.strip().split("=", 1)
            env[k] = v
    if not {"ALC_KAFKA_BOOTSTRAP", "ALC_PG_DSN"} <= set(env):
        raise StackUnavailable(f"deploy/stack.sh up printed no addresses:\n{proc.stdout[-2000:]}")
    boot, dsn = env.pop("ALC_KAFKA_BOOTSTRAP"), env.pop("ALC_PG_DSN")
    return Stack(boot, dsn, "deploy-scripts", tuple(sorted(env.items())))


@contextmanager
def resolve_stack() -> Iterator[Stack]:
    kafka, pg = os.environ.get("ALC_TEST_KAFKA_BOOTSTRAP"), os.environ.get("ALC_TEST_PG_DSN")
    if kafka and pg:
        log.warning("test stack: services named by environment (%s, %s)", kafka, pg)
        auth = tuple((k, v) for k, v in sorted(os.environ.items()) if k.startswith(_AUTH_VARS))
        yield Stack(kafka, pg, "env", auth)
        return
    if _docker_answers():
        log.warning("test stack: Docker answers, using testcontainers")
        with _testcontainers() as st:
            yield st
        return
    log.warning("test stack: no Docker engine; starting deploy/stack.sh (real Kafka + PostgreSQL)")
    yield _deploy_scripts()
