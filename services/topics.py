"""Create our topics if missing (idempotent), before any consumer joins its group.

Partition count is fixed at creation: every session maps to one partition for its life,
which is what makes the processor the single writer of a session (DESIGN.md).
"""

from __future__ import annotations

import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from services.settings import Settings

log = logging.getLogger(__name__)


def topic_names(settings: Settings) -> list[str]:
    return [
        settings.topic_records,
        settings.topic_committed,
        settings.topic_dead_letter,
        settings.topic_compaction_requests,
    ]


async def ensure_topics(settings: Settings, names: list[str] | None = None) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [n for n in (names or topic_names(settings)) if n not in existing]
        if not missing:
            return
        try:
            await admin.create_topics([NewTopic(n, settings.topic_partitions, 1) for n in missing])
            log.info("created topics %s with %d partitions", missing, settings.topic_partitions)
        except TopicAlreadyExistsError:
            pass  # another process created them first
    finally:
        await admin.close()
