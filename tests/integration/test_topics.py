"""Topics are ours: the broker creates none on first use, every service creates or
validates the topics it reads and writes at start, and a mismatch stops it at once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from schemas.settings import Settings
from streams.kafka.provision import drop_topics
from streams.kafka.topics import (
    EXIT_TOPICS,
    TopicMismatch,
    _cleanup_policies,
    ensure_topics,
    topic_names,
)
from tests.support.kafka import auth
from tests.support.services import free_port, made, provision_for
from tests.support.stack import REPO, Stack

pytestmark = pytest.mark.integration


def _settings(stack: Stack, **over: object) -> Settings:
    tag = uuid.uuid4().hex[:8]
    names = {
        "topic_records": f"tt{tag}.records",
        "topic_committed": f"tt{tag}.committed",
        "topic_dead_letter": f"tt{tag}.deadletter",
        "topic_compaction_requests": f"tt{tag}.compaction.requests",
        "topic_observability": f"tt{tag}.observability",
    }
    return made(Settings(kafka_bootstrap=stack.kafka_bootstrap, **(names | over)))  # type: ignore[arg-type]


async def _describe(stack: Stack, names: list[str]) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap, **auth())
    await admin.start()
    try:
        return {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(names)}
    finally:
        await admin.close()


@pytest.mark.spec("R15.3")
async def test_the_broker_creates_no_topic_on_first_use(stack: Stack) -> None:
    topic = f"tt-unknown-{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(
        bootstrap_servers=stack.kafka_bootstrap, **auth(), acks="all", request_timeout_ms=3000
    )
    await producer.start()
    try:
        with pytest.raises(KafkaError):  # metadata for the topic never arrives
            await producer.send_and_wait(topic, b"lost?")
    finally:
        await producer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap, **auth())
    await admin.start()
    try:
        assert topic not in await admin.list_topics()
    finally:
        await admin.close()


@pytest.mark.spec("R15.3", "R18")
async def test_ensure_topics_creates_every_topic_with_the_configured_partitions(
    stack: Stack,
) -> None:
    # 3, not the broker's num.partitions=4: the count must be ours, not a default.
    s = _settings(stack, topic_partitions=3)
    names = [
        s.topic_records,
        s.topic_committed,
        s.topic_dead_letter,
        s.topic_compaction_requests,
        s.topic_observability,
    ]
    await ensure_topics(s)
    await ensure_topics(s)  # idempotent: existing and matching is fine
    assert await _describe(stack, names) == dict.fromkeys(names, 3)
    admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap, **auth())
    await admin.start()
    try:
        assert await _cleanup_policies(admin, names) == dict.fromkeys(names, "delete")
    finally:
        await admin.close()
    # What the processor writes before committing offsets is now accepted by the broker.
    producer = AIOKafkaProducer(
        bootstrap_servers=stack.kafka_bootstrap, **auth(), request_timeout_ms=5000
    )
    await producer.start()
    try:
        await producer.send_and_wait(s.topic_observability, b"{}", key=b"s")
    finally:
        await producer.stop()


async def _listed(admin: AIOKafkaAdminClient, names: set[str]) -> None:
    for _ in range(300):
        if names <= set(await admin.list_topics()):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"not listed within 60 s: {names - set(await admin.list_topics())}")


async def test_a_benchmarks_topics_are_deleted_at_its_end(stack: Stack) -> None:
    """``drop_topics`` (benchmarks' ``drop_scratch``): a run's own topics go with it,
    faust's leader topic of its processor too, twice is fine, and no other topic is
    touched (another run's, whose processor id starts like this one's)."""
    tag = uuid.uuid4().hex[:8]
    s = _settings(stack, processor_id=f"tt{tag}-p")
    other = _settings(stack, processor_id=f"tt{tag}-p2")
    leader = {f"{x.processor_id}-__assignor-__leader" for x in (s, other)}
    admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap, **auth())
    await admin.start()
    try:
        await ensure_topics(s)
        await ensure_topics(other)
        await admin.create_topics([NewTopic(t, 1, 1) for t in leader])
        made = set(topic_names(s)) | set(topic_names(other)) | leader
        # A topic reaches the broker's metadata (what drop_topics lists) after the
        # controller accepted it: at once on an idle broker, later on one busy with the
        # other tests. The runs this stands for made theirs long before their end.
        await _listed(admin, made)
        await drop_topics(s)
        await drop_topics(s)
        mine = set(topic_names(s)) | {f"{s.processor_id}-__assignor-__leader"}
        # A deletion reaches the metadata after it is accepted, likewise.
        for _ in range(300):
            left = set(await admin.list_topics())
            if not left & mine:
                break
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
    assert left & mine == set()
    assert set(topic_names(other)) | {f"{other.processor_id}-__assignor-__leader"} <= left
    await drop_topics(other)


@pytest.mark.spec("R15.3")
async def test_an_existing_topic_that_differs_is_refused_with_its_reason(stack: Stack) -> None:
    s = _settings(stack)
    admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap, **auth())
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(s.topic_committed, 2, 1),
                NewTopic(s.topic_dead_letter, 4, 1, topic_configs={"cleanup.policy": "compact"}),
            ]
        )
    finally:
        await admin.close()
    with pytest.raises(TopicMismatch) as err:
        await ensure_topics(s)
    assert err.value.code == "topic_mismatch"
    assert err.value.details["topics"] == {
        s.topic_committed: ["2 partitions, configured 4"],
        s.topic_dead_letter: ["cleanup.policy=compact, configured delete"],
    }


@pytest.mark.spec("R15.3")
def test_every_service_stops_at_start_on_a_topic_with_other_partitions(
    stack: Stack, pg_dsn: str
) -> None:
    s = _settings(stack)

    async def precreate() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap, **auth())
        await admin.start()
        try:
            await admin.create_topics([NewTopic(s.topic_observability, 1, 1)])
        finally:
            await admin.close()

    asyncio.run(precreate())
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "ALC_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "ALC_PG_DSN": pg_dsn,
        "ALC_TOPIC_RECORDS": s.topic_records,
        "ALC_TOPIC_COMMITTED": s.topic_committed,
        "ALC_TOPIC_DEAD_LETTER": s.topic_dead_letter,
        "ALC_TOPIC_COMPACTION_REQUESTS": s.topic_compaction_requests,
        "ALC_TOPIC_OBSERVABILITY": s.topic_observability,
        "ALC_PROCESSOR_ID": f"alc-test-topics-{uuid.uuid4().hex[:6]}",
        "ALC_COMPACTION_GROUP": f"alc-test-topics-{uuid.uuid4().hex[:6]}",
        "ALC_PREPARE_PORT": str(free_port()),
    }
    provision_for(env)
    modules = ["streams", "services.compaction", "services.prepare"]
    procs = {
        m: subprocess.Popen(
            [sys.executable, "-m", m],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for m in modules
    }
    out = {}
    try:
        for m, p in procs.items():
            out[m] = (p.wait(timeout=90), (p.stdout.read() if p.stdout else b"").decode())
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    for m, (rc, log) in out.items():
        assert rc == EXIT_TOPICS, f"{m} exited {rc}:\n{log[-2000:]}"
        assert "topic_mismatch" in log, log[-2000:]
        assert f"{s.topic_observability} has 1 partitions, configured 4" in log, log[-2000:]
