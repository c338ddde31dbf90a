"""Our processes under test: the session processor and the Prepare service, each run
through its real entry point as a subprocess, isolated per test session by unique
topics, consumer group and database."""

from __future__ import annotations

import os
import socket
import sys
import uuid
from dataclasses import dataclass

from services.launcher import Proc, service_set
from tests.support.stack import REPO, Stack

LOG_DIR = REPO / "build" / "test-logs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Services:
    stack: Stack
    settings_env: dict[str, str]
    processor: Proc
    prepare: Proc
    compaction: Proc

    @property
    def prepare_url(self) -> str:
        return f"http://127.0.0.1:{self.settings_env['ALC_PREPARE_PORT']}"

    def env(self, key: str) -> str:
        return self.settings_env[key]

    def stop(self) -> None:
        self.prepare.stop()
        self.compaction.stop()
        self.processor.stop()


def services_env(stack: Stack, pg_dsn: str) -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    return {
        "ALC_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "ALC_PG_DSN": pg_dsn,
        "ALC_TOPIC_RECORDS": f"t{tag}.records",
        "ALC_TOPIC_COMMITTED": f"t{tag}.records.committed",
        "ALC_TOPIC_DEAD_LETTER": f"t{tag}.deadletter",
        "ALC_TOPIC_COMPACTION_REQUESTS": f"t{tag}.compaction.requests",
        "ALC_TOPIC_OBSERVABILITY": f"t{tag}.observability",
        "ALC_COMPACTION_GROUP": f"alc-test-compaction-{tag}",
        "ALC_PROCESSOR_ID": f"alc-test-{tag}",
        "ALC_PROCESSOR_INSTANCE_ID": f"alc-test-{tag}-1",
        "ALC_PREPARE_PORT": str(free_port()),
        "ALC_LOG_LEVEL": "INFO",
    }


def start_services(stack: Stack, pg_dsn: str, **overrides: str) -> Services:
    settings_env = services_env(stack, pg_dsn) | overrides
    env = {**os.environ, **settings_env, "PYTHONUNBUFFERED": "1"}
    logs = LOG_DIR / settings_env["ALC_PROCESSOR_ID"]
    procs = service_set(
        env, logs, REPO, "127.0.0.1", settings_env["ALC_PREPARE_PORT"], sys.executable
    )
    procs.start()
    return Services(stack, settings_env, procs.processor, procs.prepare, procs.compaction)
