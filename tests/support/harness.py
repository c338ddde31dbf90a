"""The real-stack harnesses the test modules share, one of each: the analytics process
beside the test services, a second Prepare instance on the same settings, and framework
connections bound to the test services. The fixtures of ``tests/integration/conftest.py``,
``tests/integrations/conftest.py`` and ``tests/peer/shared.py``, and those of the test
modules that need other settings (``test_revocation``, ``test_prepare_scaleout``), are
built on these; the scripted summarizer is ``tests/support/services.py``
``scripted_services`` (the ``scripted`` fixture)."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from devstack.launcher import Proc
from services.analytics.__main__ import READY as ANALYTICS_READY
from services.integrations.connection import AgentLoomConnection
from tests.support.services import LOG_DIR, TEST_SPACE, Services, free_port, provision_for
from tests.support.stack import REPO


@contextmanager
def analytics_process(services: Services) -> Iterator[Proc]:
    """``python -m services.analytics`` on ``services``' topics and database, in a consumer
    group of its own (so it reads the topics from their start), stopped at the end."""
    env = {
        **os.environ,
        **services.settings_env,
        "ALC_ANALYTICS_GROUP": f"alc-test-analytics-{uuid.uuid4().hex[:8]}",
        "ALC_METRICS_PORT": str(free_port()),
        # The default (SCHED_IDLE) may starve it while the suite keeps both cores busy;
        # what the tests check does not depend on its CPU policy (test_cpu_policy).
        "ALC_ANALYTICS_CPU": "normal",
        "PYTHONUNBUFFERED": "1",
    }
    provision_for(env)
    logs = LOG_DIR / services.env("ALC_PROCESSOR_ID")
    argv = [sys.executable, "-m", "services.analytics"]
    proc = Proc("analytics", argv, env, logs, ANALYTICS_READY, cwd=REPO)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@contextmanager
def second_prepare(services: Services) -> Iterator[tuple[Proc, str]]:
    """Another ``python -m services.prepare`` on ``services``' settings and its own port:
    (the process, its base URL), stopped at the end."""
    port = str(free_port())
    env = {**os.environ, **services.settings_env, "ALC_PREPARE_PORT": port, "PYTHONUNBUFFERED": "1"}
    url = f"http://127.0.0.1:{port}"
    proc = Proc(
        "prepare-b",
        [sys.executable, "-m", "services.prepare"],
        env,
        LOG_DIR / services.env("ALC_PROCESSOR_ID"),
        health_url=f"{url}/healthz",
        cwd=REPO,
    )
    proc.start()
    try:
        yield proc, url
    finally:
        proc.stop()


def connection(
    services: Services, api_key: str | None = None, space_id: str = TEST_SPACE
) -> AgentLoomConnection:
    """A framework connection to the test services, with their host key of TEST_SPACE (or
    ``api_key``, a key of ``space_id``); the caller closes it."""
    return AgentLoomConnection(
        services.stack.kafka_bootstrap,
        services.prepare_url,
        api_key if api_key is not None else services.api_key,
        services.env("ALC_TOPIC_RECORDS"),
        space_id=space_id,
    )


@contextmanager
def connected(services: Services) -> Iterator[AgentLoomConnection]:
    """``connection(services)``, closed at the end: what a ``connection`` fixture yields."""
    conn = connection(services)
    try:
        yield conn
    finally:
        conn.close()
