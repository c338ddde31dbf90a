"""Our topics: created when missing, validated when present, before any consumer joins.

Every process calls ``ensure_topics`` at start for every topic it reads or writes; the
broker never creates a topic on first use (``auto.create.topics.enable=false`` in
deploy/kafka.sh), so a topic nobody created is an error at once, not a topic with the
broker's defaults. Partition count is fixed at creation: every session maps to one
partition for its life, which is what makes the processor the single writer of a
session (DESIGN.md) — an existing topic with another partition count would move sessions
to other partitions, so it stops the process instead of being "fixed".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from schemas.errors import ContextError
from schemas.settings import Settings
from streams.kafka.auth import Role, kafka_auth

log = logging.getLogger(__name__)

# Exit status of a process that stops because its topics cannot be had (EX_CONFIG).
EXIT_TOPICS = 78
_TOPIC_ALREADY_EXISTS = 36
_UNKNOWN_TOPIC = 3
_LEADER_NOT_AVAILABLE = 5


class TopicSetupFailed(ContextError):
    """The broker could not be asked, or refused to create a topic."""

    code = "topic_setup_failed"
    retriable = True
    http_status = 503


class TopicMismatch(TopicSetupFailed):
    """An existing topic differs from what we configure (partitions, replication, policy)."""

    code = "topic_mismatch"
    retriable = False


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication: int = 1
    cleanup_policy: str = "delete"


@dataclass(frozen=True)
class ObservedTopic:
    partitions: int
    replication: int
    cleanup_policy: str | None


def topic_names(settings: Settings) -> list[str]:
    """Every topic any of our processes reads or writes."""
    return [
        settings.topic_records,
        settings.topic_committed,
        settings.topic_dead_letter,
        settings.topic_compaction_requests,
        settings.topic_observability,
    ]


def topic_specs(settings: Settings, names: Iterable[str] | None = None) -> list[TopicSpec]:
    # One partition count for all: everything is keyed by session id, and keeping the
    # counts equal keeps a session's records, commits and requests on the same number.
    return [
        TopicSpec(n, settings.topic_partitions, settings.topic_replication)
        for n in (names or topic_names(settings))
    ]


def mismatches(spec: TopicSpec, seen: ObservedTopic) -> list[str]:
    """What differs between an existing topic and its spec (pure)."""
    out = []
    if seen.partitions != spec.partitions:
        out.append(f"{seen.partitions} partitions, configured {spec.partitions}")
    if seen.replication != spec.replication:
        out.append(f"replication factor {seen.replication}, configured {spec.replication}")
    if seen.cleanup_policy is not None and seen.cleanup_policy != spec.cleanup_policy:
        out.append(f"cleanup.policy={seen.cleanup_policy}, configured {spec.cleanup_policy}")
    return out


async def ensure_topics(
    settings: Settings,
    names: list[str] | None = None,
    *,
    timeout_s: float = 30.0,
    role: Role = "admin",
) -> None:
    """Create the missing topics and check the existing ones; raise ``TopicMismatch``
    naming every difference, or ``TopicSetupFailed`` if the broker cannot be asked.
    ``role``: whose principal asks; a service's may only describe its topics (the
    operator creates them: ``streams.kafka.provision``), so a missing topic stops it here."""
    specs = topic_specs(settings, names)
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.kafka_bootstrap,
        request_timeout_ms=int(timeout_s * 1000),
        **kafka_auth(settings, role).client_kwargs(),
    )
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        missing = [s for s in specs if s.name not in existing]
        if missing:
            await _create(admin, missing)
        seen = await _observe(admin, [s.name for s in specs], timeout_s)
    except KafkaError as exc:
        raise TopicSetupFailed(
            f"cannot create or check topics on {settings.kafka_bootstrap}: {exc!r}",
            bootstrap=settings.kafka_bootstrap,
        ) from exc
    finally:
        await admin.close()
    problems = {s.name: p for s in specs if (p := mismatches(s, seen[s.name]))}
    if problems:
        raise TopicMismatch(
            "existing topics differ from the configuration: "
            + "; ".join(f"{name} has {', '.join(p)}" for name, p in problems.items())
            + " (a partition count is fixed for a topic's life: use other topic names"
            " or set ALC_TOPIC_PARTITIONS / ALC_TOPIC_REPLICATION to match)",
            topics=problems,
        )


async def require_topics(settings: Settings, role: Role) -> None:
    """``ensure_topics`` for an entry point: a failure stops the process at once with its
    code and message and exit status ``EXIT_TOPICS``, before any consumer joins."""
    try:
        await ensure_topics(settings, role=role)
    except TopicSetupFailed as exc:
        log.critical("cannot start: %s: %s", exc.code, exc.message)
        raise SystemExit(EXIT_TOPICS) from exc


async def _create(admin: AIOKafkaAdminClient, specs: list[TopicSpec]) -> None:
    resp = await admin.create_topics(
        [
            NewTopic(
                s.name,
                s.partitions,
                s.replication,
                topic_configs={"cleanup.policy": s.cleanup_policy},
            )
            for s in specs
        ]
    )
    failed = []
    for err in resp.topic_errors:
        name, code = err[0], err[1]
        # Another process created it first: fine, it is validated like any existing one.
        if code not in (0, _TOPIC_ALREADY_EXISTS):
            failed.append(f"{name}: error {code} {err[2] if len(err) > 2 else ''}".strip())
    if failed:
        raise TopicSetupFailed(f"the broker refused to create topics: {'; '.join(failed)}")
    log.info("created topics %s", [(s.name, s.partitions) for s in specs])


async def _observe(
    admin: AIOKafkaAdminClient, names: list[str], timeout_s: float
) -> dict[str, ObservedTopic]:
    # A topic just created may not be in the metadata yet, or have no leader: wait.
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        topics = {t["topic"]: t for t in await admin.describe_topics(names)}
        pending = [
            n
            for n in names
            if n not in topics
            or topics[n]["error_code"] in (_UNKNOWN_TOPIC, _LEADER_NOT_AVAILABLE)
            or not topics[n]["partitions"]
        ]
        if not pending:
            break
        if asyncio.get_running_loop().time() > deadline:
            raise TopicSetupFailed(f"topics {pending} not in the broker's metadata in time")
        await asyncio.sleep(0.2)
    policies = await _cleanup_policies(admin, names)
    return {
        n: ObservedTopic(
            len(topics[n]["partitions"]),
            len(topics[n]["partitions"][0]["replicas"]),
            policies.get(n),
        )
        for n in names
    }


async def _cleanup_policies(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, str]:
    responses: list[Any] = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, n, {"cleanup.policy": None}) for n in names]
    )
    out: dict[str, str] = {}
    for resp in responses:
        for res in resp.to_object()["resources"]:
            for entry in res["config_entries"]:
                if entry["config_names"] == "cleanup.policy":
                    out[res["resource_name"]] = entry["config_value"]
    return out
