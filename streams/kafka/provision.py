"""Provision the broker for a deployment, as the operator's ``admin`` principal: the
SCRAM users of the credentials file, each principal's ACLs (``domain.bus_access``) and
each runtime principal's client quotas (``domain.bus_access``).
Idempotent; ``deploy/stack.sh up`` runs it, and so does every test or benchmark that
configures its own topic or group names. Topics are created by the services themselves
at start (``streams.kafka.topics``: each may create only its own).

    python -m streams.kafka.provision                 # the users and ACLs of ALC_*
    python -m streams.kafka.provision --runtime NAME  # also a runtime principal (its password)

``remove_runtime`` undoes ``add_runtime`` (the hostile-tenant probe's principal goes when
the probe ends).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import UnknownTopicOrPartitionError

from domain.bus_access import ROLES, BusNames, Quota, acl_plan, quota_plan
from schemas.settings import Settings
from streams.kafka.admin import (
    BusAdminFailed,
    create_acls,
    delete_acls,
    delete_scram_users,
    upsert_scram_users,
    wait_enforced,
)
from streams.kafka.auth import credentials_path, kafka_auth, read_credentials
from streams.kafka.quotas import set_quotas
from streams.kafka.topics import ensure_topics, topic_names

log = logging.getLogger("agentloom.provision")


def bus_names(s: Settings) -> BusNames:
    return BusNames(
        records=s.topic_records,
        committed=s.topic_committed,
        dead_letter=s.topic_dead_letter,
        compaction_requests=s.topic_compaction_requests,
        observability=s.topic_observability,
        processor_id=s.processor_id,
        compaction_group=s.compaction_group,
        analytics_group=s.analytics_group,
    )


async def provision(settings: Settings, runtimes: dict[str, str] | None = None) -> int:
    """Users (the roles of the credentials file, and ``runtimes``: name → password) and
    ACLs; returns the number of ACLs in the plan."""
    if not kafka_auth(settings, "admin").sasl:
        return 0  # a broker without authentication has no users or ACLs
    users = read_credentials(credentials_path(settings))
    wanted = {r: users[r] for r in ROLES if r in users} | (runtimes or {})
    extra = tuple(n for n in (runtimes or {}) if n != "runtime")
    async with _admin(settings) as admin:
        await upsert_scram_users(admin, wanted)
        acls = acl_plan(bus_names(settings), ("runtime", *extra))
        await create_acls(admin, acls)
        if acls:  # what runs next (topic set-up, the services) must not be refused
            await wait_enforced(admin, acls[-1])
        await set_quotas(admin, runtime_quotas(settings, ("runtime", *extra)))
    return len(acls)


@asynccontextmanager
async def _admin(settings: Settings) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.kafka_bootstrap,
        request_timeout_ms=30_000,
        **kafka_auth(settings, "admin").client_kwargs(),
    )
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


def runtime_quotas(settings: Settings, runtimes: tuple[str, ...]) -> tuple[Quota, ...]:
    """The client quotas of the runtime principals (domain.bus_access)."""
    return quota_plan(
        runtimes, settings.runtime_producer_byte_rate, settings.runtime_request_percentage
    )


async def add_runtime(settings: Settings, name: str) -> str:
    """A new runtime principal (write the records topic, nothing else, within the runtime
    quotas); its password."""
    password = secrets.token_hex(24)
    await provision(settings, {name: password})
    return password


async def remove_runtime(settings: Settings, name: str) -> int:
    """``add_runtime``'s inverse: the principal's ACLs, quotas and SCRAM credential go
    (the broker refuses its logins from then on); how many ACLs it had. Idempotent. The
    roles of the deployment (``runtime`` included) are never removed this way."""
    if name in ROLES or name == "admin":
        raise ValueError(f"{name!r} is a role of the deployment, not an added runtime")
    if not kafka_auth(settings, "admin").sasl:
        return 0
    async with _admin(settings) as admin:
        n = await delete_acls(admin, f"User:{name}")
        await set_quotas(admin, runtime_quotas(settings, (name,)), remove=True)
        await delete_scram_users(admin, [name])
    return n


async def ensure_bus(settings: Settings, names: list[str] | None = None) -> None:
    """``provision`` and then ``streams.kafka.topics.ensure_topics`` as admin: what a
    benchmark or load tool with its own topic and group names needs before it starts
    our services."""
    await provision(settings)
    await ensure_topics(settings, names)


async def drop_topics(settings: Settings) -> None:
    """``ensure_bus``'s topics deleted, as admin, with faust's own (its processor id and a
    dash, e.g. the leader election's): a benchmark's or load tool's, at its end (a
    broker's every partition costs it CPU and files for as long as it is kept; thousands
    of runs' topics slowed the next runs down). Idempotent."""
    faust_own = f"{settings.processor_id}-"
    async with _admin(settings) as admin:
        existing = set(await admin.list_topics())
        ours = set(topic_names(settings))
        gone = sorted(t for t in existing if t in ours or t.startswith(faust_own))
        if not gone:
            return
        resp = await admin.delete_topics(gone)
    # Deleted already (a second call, or another clean-up first) is what was asked.
    failed = [
        f"{name}: error {code}"
        for name, code, *_ in resp.topic_error_codes
        if code not in (0, UnknownTopicOrPartitionError.errno)
    ]
    if failed:
        raise BusAdminFailed(f"the broker refused to delete topics: {'; '.join(failed)}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m streams.kafka.provision")
    parser.add_argument("--runtime", help="also create this runtime principal")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    settings = Settings()
    t0 = time.monotonic()
    if args.runtime:
        password = asyncio.run(add_runtime(settings, args.runtime))
        print(f"ALC_KAFKA_USERNAME={args.runtime}\nALC_KAFKA_PASSWORD={password}")
        return
    n = asyncio.run(provision(settings))
    print(
        f"[provision] users, {n} ACLs and the runtime quotas in place on"
        f" {settings.kafka_bootstrap}"
        f" ({time.monotonic() - t0:.1f} s)"
    )


if __name__ == "__main__":
    main()
