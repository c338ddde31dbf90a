"""How the session processor is wired from settings: its PostgreSQL pool and the
``BatchProcessor`` with its ports, the one place either is built — by the composition root
(``streams.bootstrap``) and by an offload worker process (``streams.drivers.worker``).
Below both: nothing here imports a driver or faust."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg

from domain.context.tokens import CachedCounter
from domain.window.budget import ModelProfile
from schemas.settings import Settings
from storage.api_keys import PgBusKeys
from storage.compaction.control import GainSettings
from storage.pool import create_pool
from storage.processor_store import PgProcessing
from storage.roles import dsn_of
from storage.tokenizers import make_counter
from streams.envelopes import Authenticator
from streams.kafka.bus_secrets import verify_keys
from streams.kafka.publish import Publisher
from streams.metrics import MeteredPublisher
from streams.outgoing import ProcessorConfig
from streams.processor import BatchProcessor


def build_processor(settings: Settings, pool: asyncpg.Pool, publisher: Publisher) -> BatchProcessor:
    """The one place a processor is wired from settings, whichever driver feeds it."""
    counter = CachedCounter(make_counter("cl100k_base", settings.tiktoken_file))
    # Dead letters are counted by reason as they are sent (R18, /metrics).
    metered = MeteredPublisher(publisher, settings.topic_dead_letter)
    auth = Authenticator(PgBusKeys(pool), verify_keys(settings))
    return BatchProcessor(
        PgProcessing(pool, gain_settings(settings)),
        metered,
        counter,
        ProcessorConfig(
            consumer=settings.processor_id,
            topic_records=settings.topic_records,
            topic_committed=settings.topic_committed,
            topic_dead_letter=settings.topic_dead_letter,
            topic_compaction_requests=settings.topic_compaction_requests,
            topic_observability=settings.topic_observability,
            pipeline_chunk=settings.processor_pipeline_chunk,
        ),
        auth,
    )


def gain_settings(settings: Settings) -> GainSettings:
    """What the gain check weighs of this deployment: a summarizer other than the
    built-in extractive one is a billed model reading its instruction on every job, and
    a policy's compaction purpose may be budgeted on a named profile of the catalog
    (``ALC_MODEL_PROFILES_FILE``, read here for its prices; Prepare and the compaction
    service check it in full and refuse a malformed one at start)."""
    billed = settings.summarizer != "extractive"
    profiles: dict[str, ModelProfile] = {}
    if settings.model_profiles_file:
        raw = json.loads(Path(settings.model_profiles_file).read_text("utf-8"))
        profiles = {name: ModelProfile.from_dict(spec) for name, spec in raw.items()}
    return GainSettings(billed, settings.summarizer_overhead_tokens if billed else 0, profiles)


async def open_pool(settings: Settings) -> asyncpg.Pool:
    # Its own login (storage/roles.py); migrations run as pg_dsn's owner.
    dsn = dsn_of(settings, "processor")
    return await create_pool(
        dsn, settings.pg_pool_min, settings.pg_pool_max, plan_cache_mode=settings.pg_plan_cache_mode
    )
