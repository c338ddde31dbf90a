"""``agentloom topics check`` and ``agentloom migrate``: the broker's topics against the
configuration (streams/kafka/topics.py), and the database's schema (storage/migrate.py)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from schemas.settings import Settings
from services.cli.output import JsonOption, fail, out, show
from storage.migrate import apply_dsn, available
from storage.roles import configured_dsn
from streams.kafka.auth import kafka_auth
from streams.kafka.topics import TopicSetupFailed, ensure_topics, topic_names

topics = typer.Typer(no_args_is_help=True, help="Kafka topics of AgentLoom Context.")


@topics.command()
def check(
    create: Annotated[bool, typer.Option(help="create missing topics (else only report)")] = True,
    as_json: JsonOption = False,
) -> None:
    """Create what is missing and check partitions, replication and cleanup policy
    against ALC_TOPIC_* (exit 1 on any difference or an unreachable broker)."""
    s = Settings()
    try:
        asyncio.run(ensure_topics(s) if create else _exists(s))
    except TopicSetupFailed as exc:
        fail(exc, as_json)
    names = topic_names(s)
    data = {"ok": True, "bootstrap": s.kafka_bootstrap, "topics": names}
    show(as_json, data, lambda: out.print(f"[green]ok[/] {', '.join(names)}"))


async def _exists(s: Settings) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(
        bootstrap_servers=s.kafka_bootstrap, **kafka_auth(s, "cli").client_kwargs()
    )
    try:
        await admin.start()
        missing = set(topic_names(s)) - set(await admin.list_topics())
    finally:
        await admin.close()
    if missing:
        raise TopicSetupFailed(f"missing topics: {sorted(missing)}", missing=sorted(missing))
    await ensure_topics(s, role="cli")  # all exist: this only checks them


def migrate(as_json: JsonOption = False) -> None:
    """Apply pending SQL migrations to ALC_PG_DSN (safe to run concurrently)."""
    dsn = configured_dsn(Settings())  # the owner's login: the one that may migrate
    try:
        applied = asyncio.run(apply_dsn(dsn))
    except Exception as exc:  # a database out of reach: reported, exit 1
        fail(exc, as_json)
    latest = max((m.version for m in available()), default=0)
    data = {"ok": True, "applied": applied, "latest": latest}
    show(
        as_json,
        data,
        lambda: out.print(f"[green]ok[/] applied {applied or 'nothing'}; schema at {latest}"),
    )
