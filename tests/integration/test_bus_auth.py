"""The bus is authenticated and bound to spaces (issue 25, finding 1): on the real broker,
with two spaces' credentials — space-1's runtime (the test stack's host key and the
``runtime`` principal) and space B's runtime (its own host key and its own principal)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from domain.bus_access import Acl, Op, Pattern, Resource
from schemas.contracts import RecordKind, RetractionPayload
from schemas.wire import CompactionOutcome, ControlEvent, DeadLetter, encode_control
from services.sdk.client import ContextClient, RunHandle
from storage.api_keys import revoke_key
from streams.envelopes import KEY_TTL_S
from streams.kafka.admin import BusAdminFailed, create_acls, wait_enforced
from streams.kafka.auth import KafkaAuth
from streams.kafka.provision import add_runtime, runtime_quotas
from streams.kafka.quotas import quotas_of
from tests.integration.test_poison import dead_letters_at
from tests.support import events as ev
from tests.support.flows import client, new_session, wait_committed
from tests.support.kafka import auth, signed
from tests.support.services import Services, settings_of

pytestmark = pytest.mark.spec("R3.3", "R13.1", "R15.3")


@dataclasses.dataclass
class SpaceB:
    api_key: str
    key_id: str
    auth: KafkaAuth


@pytest.fixture(scope="module")
async def space_b(services: Services) -> SpaceB:
    """Space B's runtime: a host key of space-b and a runtime principal of its own."""
    key = await services.new_key("space-b")
    name = f"rt-b-{uuid.uuid4().hex[:6]}"
    password = await add_runtime(settings_of(services.settings_env), name)
    return SpaceB(key.key, key.key_id, KafkaAuth("SASL_PLAINTEXT", "SCRAM-SHA-512", name, password))


@pytest.fixture
async def b_client(services: Services, space_b: SpaceB) -> AsyncIterator[ContextClient]:
    async with ContextClient(
        services.stack.kafka_bootstrap,
        services.prepare_url,
        topic=services.env("ALC_TOPIC_RECORDS"),
        api_key=space_b.api_key,
        kafka_auth=space_b.auth,
    ) as c:
        yield c


async def letters_for(
    services: Services, sent: set[tuple[int, int]]
) -> dict[tuple[int, int], DeadLetter]:
    return await dead_letters_at(services, sent)


async def records_of(db: asyncpg.Pool, session_id: str) -> list[str]:
    rows = await db.fetch(
        "SELECT event_key FROM records WHERE session_id=$1 ORDER BY session_sequence", session_id
    )
    return [r["event_key"] for r in rows]


def as_space(run: RunHandle, space_id: str) -> RunHandle:
    return dataclasses.replace(run, space_id=space_id)


async def test_a_runtime_of_space_b_cannot_append_to_or_retract_from_space_a(
    services: Services, db: asyncpg.Pool, b_client: ContextClient
) -> None:
    async with client(services) as a:
        run = await a.start_run(await new_session(a))
        p, o = await a.append_user(run, "the question of A", "a-question")
        await wait_committed(db, services, {p: o})
        (target,) = await db.fetch(
            "SELECT record_id FROM records WHERE session_id=$1 AND event_key='a-question'",
            run.session_id,
        )
        retract = ev.make(
            run,
            RecordKind.RECORD_RETRACTED,
            "host",
            "",
            RetractionPayload(target["record_id"]),
            "b-retracts",
            operation_id=target["record_id"],
        )
        forged = [
            ev.user(run, "B writes into A", "b-claims-a"),  # A's space, B's key
            ev.user(as_space(run, "space-b"), "B writes as B", "b-as-b"),  # B's space, A's session
            retract,
            dataclasses.replace(retract, scope=as_space(run, "space-b").scope(), event_key="b-r2"),
        ]
        sent = set(await b_client.producer.send_many(forged))
        p2, o2 = await a.append_user(run, "A goes on", "a-after")
        await wait_committed(db, services, {p2: o2})
    letters = await letters_for(services, sent)
    assert sorted(dl.reason_code for dl in letters.values()) == [
        "scope_mismatch",
        "scope_mismatch",
        "unauthenticated_event",
        "unauthenticated_event",
    ]
    keys = await records_of(db, run.session_id)
    assert {"a-question", "a-after"} <= set(keys)
    assert not {"b-claims-a", "b-as-b", "b-retracts", "b-r2"} & set(keys)
    retracted = await db.fetchval(
        "SELECT count(*) FROM records WHERE session_id=$1 AND kind='record_retracted'",
        run.session_id,
    )
    assert retracted == 0


async def test_a_runtime_cannot_speak_as_the_compaction_service(
    services: Services, db: asyncpg.Pool, b_client: ContextClient, space_b: SpaceB
) -> None:
    async with client(services) as a:
        run = await a.start_run(await new_session(a))
        body = CompactionOutcome(
            f"cmp_{uuid.uuid4().hex[:8]}",
            "succeeded",
            "save",
            summary_id="sum_forged",
            summary_json=json.dumps({"draft": {}, "text": "forged summary"}),
            covered_ranges=((1, 1),),
            covered_record_ids=("rec_x",),
            summary_tokens=1,
            covered_tokens=10,
        )
        value = encode_control(
            ControlEvent(
                f"outcome:{body.job_id}", run.session_id, run.run_id, run.instance_id, 1, body
            )
        )
        key = run.session_id.encode()
        topic = services.env("ALC_TOPIC_RECORDS")
        producer = b_client.producer._producer
        sent = set()
        for headers in (
            signed(space_b.api_key, key, value),
            signed(services.api_key, key, value),
            None,
        ):
            md = await producer.send_and_wait(topic, value, key=key, headers=headers)
            sent.add((md.partition, md.offset))
        p, o = await a.append_user(run, "after", "after-forged-outcome")
        await wait_committed(db, services, {p: o})
    letters = await letters_for(services, sent)
    assert [dl.reason_code for dl in letters.values()] == ["unauthenticated_event"] * 3
    assert (
        await db.fetchval(
            "SELECT count(*) FROM summary_revisions WHERE session_id=$1", run.session_id
        )
        == 0
    )


async def _refused(client_kw: dict[str, object], op: str, topic: str) -> bool:
    """Whether the broker refuses ``op`` ("write"/"read") on ``topic`` for these credentials."""
    if op == "write":
        producer = AIOKafkaProducer(request_timeout_ms=5000, **client_kw)  # type: ignore[arg-type]
        try:
            await producer.start()
            await producer.send_and_wait(topic, b"x", key=b"k")
            return False
        except KafkaError:
            return True
        finally:
            await producer.stop()
    consumer = AIOKafkaConsumer(
        topic,
        group_id=None,
        auto_offset_reset="earliest",
        request_timeout_ms=5000,
        **client_kw,  # type: ignore[arg-type]
    )
    try:
        await consumer.start()
        await consumer.getmany(timeout_ms=3000)
        return False
    except KafkaError:
        return True
    finally:
        await consumer.stop()


async def test_each_principal_is_held_to_its_acls_on_the_broker(
    services: Services, space_b: SpaceB
) -> None:
    boot = {"bootstrap_servers": services.stack.kafka_bootstrap}
    env = services.env
    b = boot | space_b.auth.client_kwargs()
    assert await _refused(b, "write", env("ALC_TOPIC_COMMITTED"))
    assert await _refused(b, "write", env("ALC_TOPIC_COMPACTION_REQUESTS"))
    assert await _refused(b, "read", env("ALC_TOPIC_RECORDS"))
    assert not await _refused(b, "write", env("ALC_TOPIC_RECORDS"))  # all a runtime may do
    analytics = boot | auth("analytics")
    assert await _refused(analytics, "read", env("ALC_TOPIC_RECORDS"))
    assert await _refused(analytics, "write", env("ALC_TOPIC_OBSERVABILITY"))
    assert await _refused(boot | auth("prepare"), "write", env("ALC_TOPIC_COMMITTED"))
    assert await _refused(boot | auth("compaction"), "write", env("ALC_TOPIC_COMMITTED"))
    wrong = dataclasses.replace(space_b.auth, password="not-the-password")
    assert await _refused(boot | wrong.client_kwargs(), "write", env("ALC_TOPIC_RECORDS"))
    assert await _refused(boot, "write", env("ALC_TOPIC_RECORDS"))  # no SASL at all


async def test_a_revoked_runtime_key_signs_nothing_after_the_key_ttl(
    services: Services, db: asyncpg.Pool
) -> None:
    key = await services.new_key("space-1")
    async with client(services, api_key=key.key) as c:
        run = await c.start_run(await new_session(c))
        p, o = await c.append_user(run, "before revocation", "before")
        await wait_committed(db, services, {p: o})
        assert await revoke_key(db, key.key_id)
        await asyncio.sleep(KEY_TTL_S + 0.5)  # the processor's key cache
        sent = await c.producer.send(ev.user(run, "after", "after-revocation"))
        letters = await letters_for(services, {sent})
    assert letters[sent].reason_code == "unauthenticated_event"
    assert "after-revocation" not in await records_of(db, run.session_id)


@pytest.mark.spec("R3.3")
async def test_each_runtime_principal_is_held_to_the_runtime_quotas(
    services: Services, space_b: SpaceB
) -> None:
    """Issue 38 (item 5): provisioning gives every runtime principal — the stack's and one
    added later — the client quotas of domain.bus_access; our services have none."""
    settings = settings_of(services.settings_env)
    admin = AIOKafkaAdminClient(bootstrap_servers=services.stack.kafka_bootstrap, **auth())
    await admin.start()
    try:
        for q in runtime_quotas(settings, ("runtime", space_b.auth.username or "")):
            assert await quotas_of(admin, q.user) == q.values(), q.user
        assert await quotas_of(admin, "processor") == {}
    finally:
        await admin.close()


async def test_acls_are_waited_for_until_the_broker_enforces_them(services: Services) -> None:
    """``provision`` returns once the broker enforces the ACLs it created (CreateAcls
    answers when the controller committed them; the broker applies them later): the
    check sees a new ACL, and does not pass one the broker does not have."""
    topic = f"acl-wait-{uuid.uuid4().hex[:8]}"
    acl = Acl("User:prepare", Resource.TOPIC, topic, Pattern.LITERAL, Op.DESCRIBE)
    admin = AIOKafkaAdminClient(bootstrap_servers=services.stack.kafka_bootstrap, **auth())
    await admin.start()
    try:
        with pytest.raises(BusAdminFailed, match="does not enforce"):
            await wait_enforced(admin, acl, timeout_s=0.3)  # never created
        await create_acls(admin, [acl])
        await wait_enforced(admin, acl, timeout_s=10)
    finally:
        await admin.close()
