"""Our processes under test: the session processor and the Prepare service, each run
through its real entry point as a subprocess, isolated per test session by unique
topics, consumer group and database."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from devstack.launcher import Proc, ServiceSet, service_set
from devstack.ports import free_port
from domain.auth import KeyKind
from schemas.settings import Settings
from storage.api_keys import IssuedKey, issue
from storage.migrate import apply_dsn
from streams.kafka.bus_secrets import issuer_secret
from streams.kafka.provision import drop_topics, provision
from streams.kafka.topics import ensure_topics
from tests.support.model_server import Script, model_server
from tests.support.stack import REPO, Stack

LOG_DIR = REPO / "build" / "test-logs"
TEST_SPACE = "space-1"  # the tenant space of the tests' sessions (flows.new_session)


@dataclass
class Services:
    stack: Stack
    settings_env: dict[str, str]
    processor: Proc
    prepare: Proc
    compaction: Proc
    # A host key of TEST_SPACE (the runtime's credential): what ``flows.client`` sends.
    api_key: str = ""

    @property
    def prepare_url(self) -> str:
        return f"http://127.0.0.1:{self.settings_env['ALC_PREPARE_PORT']}"

    def env(self, key: str) -> str:
        return self.settings_env[key]

    async def new_key(
        self, space_id: str, kind: KeyKind = KeyKind.HOST, actor_id: str | None = None
    ) -> IssuedKey:
        issuer = issuer_secret(settings_of(self.settings_env))
        return await issue(
            self.env("ALC_PG_DSN"), space_id, kind, actor_id, label="tests", issuer=issuer
        )

    def stop(self) -> None:
        """The three at once (each waits for its own exit), then their topics deleted: a
        broker pays for every partition it keeps, and a test run starts ~90 sets."""
        with ThreadPoolExecutor(3) as pool:
            parts = (self.prepare, self.compaction, self.processor)
            for done in [pool.submit(p.stop) for p in parts]:
                done.result()
        loop = asyncio.new_event_loop()  # beside pytest-asyncio's loop, like provision_for
        try:
            loop.run_until_complete(drop_topics(settings_of(self.settings_env)))
        finally:
            loop.close()


# The names of every test's topics this process made (``services_env``, ``made``): deleted
# when its test session ends (``drop_made_topics``), whether or not the test that made them
# stopped its processes through ``Services.stop``.
_MADE: list[Settings] = []


def made(settings: Settings) -> Settings:
    """``settings``, its topics (``streams.kafka.topics.topic_names``) and its processor's
    leader topic to be deleted at the session's end. Only for names of a test's own: every
    configured name goes, the defaults' too."""
    _MADE.append(settings)
    return settings


def made_topic(name: str) -> str:
    """``made`` for one topic a test named ``name`` (the other names derived from it)."""
    parts = ("committed", "dead_letter", "compaction_requests", "observability")
    made(
        Settings(
            topic_records=name, processor_id=name, **{f"topic_{p}": f"{name}.{p}" for p in parts}
        )
    )
    return name


def drop_made_topics() -> None:
    """The topics of ``made`` deleted (a broker pays for every partition it keeps, and a
    development stack outlives many test runs); one that fails is said, not raised."""
    loop = asyncio.new_event_loop()  # after pytest-asyncio's loops, like provision_for
    try:
        for settings in _MADE:
            try:
                loop.run_until_complete(drop_topics(settings))
            except Exception as exc:
                print(f"[tests] topics of {settings.topic_records} not deleted: {exc!r}")
    finally:
        loop.close()
    _MADE.clear()


def services_env(stack: Stack, pg_dsn: str) -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    env = stack.env | {
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
        # The model catalog policies may reference (tests/integration/test_purpose_profiles.py).
        "ALC_MODEL_PROFILES_FILE": str(REPO / "tests/support/model_profiles.json"),
        "ALC_MODEL_LIMITS": "test-cap-2k=2000",
    }
    made(settings_of(env))
    return env


def settings_of(env: dict[str, str]) -> Settings:
    """The ``Settings`` a process started with ``env`` reads (the ALC_* entries)."""
    return Settings(**{k[4:].lower(): v for k, v in env.items() if k.startswith("ALC_")})


def provision_for(env: dict[str, str]) -> None:
    """The broker's users and ACLs for ``env``'s topic and group names (streams.kafka.provision),
    in a private loop: this runs in sync fixtures, beside pytest-asyncio's own loop."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(provision(settings_of(env)))
    finally:
        loop.close()


def _ready_to_start(env: dict[str, str]) -> None:
    """What Prepare does first at its start, done before it: the migrations, and the
    topics (as the operator, ``streams.kafka.provision.ensure_bus`` does), so that the
    three services can start at once (``ServiceSet.start`` starts them one after the
    other for this); in a private loop, like ``provision_for``."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(apply_dsn(env["ALC_PG_DSN"]))
        loop.run_until_complete(ensure_topics(settings_of(env)))
    finally:
        loop.close()


def _start_all(procs: ServiceSet) -> None:
    """Prepare, the processor and compaction at once, each waiting for its own
    readiness (their start-ups are mostly imports and joining a consumer group: ~3 s
    less than one after the other); if one fails, all are stopped."""
    parts = (procs.prepare, procs.processor, procs.compaction)
    with ThreadPoolExecutor(len(parts)) as pool:
        errors = [f.exception() for f in [pool.submit(p.start) for p in parts]]
    if (failed := next((e for e in errors if e is not None), None)) is not None:
        procs.stop()
        raise failed


def start_services(stack: Stack, pg_dsn: str, **overrides: str) -> Services:
    settings_env = services_env(stack, pg_dsn) | overrides
    provision_for(settings_env)
    _ready_to_start(settings_env)
    env = {**os.environ, **settings_env, "PYTHONUNBUFFERED": "1"}
    logs = LOG_DIR / settings_env["ALC_PROCESSOR_ID"]
    procs = service_set(
        env, logs, REPO, "127.0.0.1", settings_env["ALC_PREPARE_PORT"], sys.executable
    )
    _start_all(procs)
    # Prepare applied the migrations at start: the keys table is there.
    # A private loop: this runs in sync fixtures, beside pytest-asyncio's own loop.
    loop = asyncio.new_event_loop()
    try:
        issuer = issuer_secret(settings_of(settings_env))
        key = loop.run_until_complete(
            issue(pg_dsn, TEST_SPACE, KeyKind.HOST, label="tests", issuer=issuer)
        )
    finally:
        loop.close()
    return Services(stack, settings_env, procs.processor, procs.prepare, procs.compaction, key.key)


@contextmanager
def scripted_services(
    stack: Stack, pg_dsn: str, timeout_s: str = "5", **overrides: str
) -> Iterator[tuple[Services, Script]]:
    """Our services with the OpenAI-compatible summarizer pointed at a scripted model
    server (``tests.support.model_server``); stopped at the end."""
    with model_server() as (url, script):
        svc = start_services(
            stack,
            pg_dsn,
            ALC_SUMMARIZER="openai",
            ALC_SUMMARIZER_BASE_URL=url,
            ALC_SUMMARIZER_MODEL="scripted",
            ALC_SUMMARIZER_TIMEOUT_S=timeout_s,
            **overrides,
        )
        try:
            yield svc, script
        finally:
            svc.stop()
