"""Composition root of the session processor process: settings, the PostgreSQL pool, the
Kafka publisher and the ``BatchProcessor`` are built here and only here, for either
driver (faust, the default, or aiokafka directly). The drivers (``streams.drivers.app``,
``streams.drivers.direct``) only move batches; ``python -m streams`` calls ``main``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from pathlib import Path
from typing import Any

import asyncpg
import faust

from domain.context.tokens import CachedCounter, make_counter
from domain.window.budget import ModelProfile
from schemas.settings import Settings
from storage.api_keys import PgBusKeys
from storage.compaction.control import GainSettings
from storage.migrate import apply_dsn
from storage.pool import create_pool
from storage.processor_store import PgProcessing
from storage.roles import configured_dsn, dsn_of
from streams import tracing
from streams.drivers import direct
from streams.drivers.app import BatchHandler, create_app
from streams.drivers.offload import OffloadedProcessor, handle_offloaded_or_exit
from streams.envelopes import Authenticator
from streams.instance import claim_instance_id
from streams.kafka.auth import kafka_auth
from streams.kafka.bus_secrets import verify_keys
from streams.kafka.publish import AiokafkaPublisher, FaustPublisher, Publisher
from streams.kafka.topics import require_topics
from streams.metrics import MeteredPublisher, serve
from streams.outgoing import ProcessorConfig
from streams.processor import BatchProcessor, handle_or_exit

log = logging.getLogger("agentloom.processor")

FAUST_DATA_DIR = Path(".state/faust")


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
    return await create_pool(dsn, settings.pg_pool_min, settings.pg_pool_max)


async def prepare_infrastructure(settings: Settings) -> None:
    await apply_dsn(configured_dsn(settings))
    # Every topic the processor reads or writes (records in; committed, dead letters,
    # compaction requests, observability out) exists with our partition count, or the
    # process stops here — before faust or aiokafka joins the group.
    await require_topics(settings, "processor")


async def run_direct(settings: Settings) -> None:
    """The aiokafka driver: runs until SIGTERM/SIGINT."""
    pool = await open_pool(settings)
    publisher = AiokafkaPublisher(settings.kafka_bootstrap, kafka_auth(settings, "processor"))
    consumer = direct.make_consumer(settings)
    await publisher.start()
    await consumer.start()
    proc = build_processor(settings, pool, publisher)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "[direct-driver]: Ready, consuming %s as %s",
        settings.topic_records,
        settings.processor_instance_id,
    )
    try:
        await direct.consume(
            consumer,
            proc,
            stop,
            settings.processor_batch_max,
            settings.processor_transient_retry_s,
        )
    finally:
        await consumer.stop()  # leaves the group: partitions move at once
        await publisher.stop()
        await pool.close()


def faust_app(settings: Settings, data_dir: Path = FAUST_DATA_DIR) -> faust.App:
    """The faust driver's app; its processor publishes through faust's own producer."""
    # faust keeps its tables' state under the data dir and does not create it: a fresh
    # clone (no .state/ yet) could not start the processor.
    data_dir.mkdir(parents=True, exist_ok=True)

    async def build(app: faust.App) -> BatchHandler:
        if settings.processor_offload:
            worker = OffloadedProcessor(settings)
            await worker.start()

            async def stop_worker(_app: Any, /, *_: Any, signal: Any, **__: Any) -> None:
                await worker.stop()  # after faust stopped consuming: nothing in flight

            app.on_before_shutdown.connect(stop_worker)
            return lambda batch: handle_offloaded_or_exit(worker, batch)
        proc = build_processor(settings, await open_pool(settings), FaustPublisher(app))
        return lambda batch: handle_or_exit(proc, batch, settings.processor_transient_retry_s)

    return create_app(settings, data_dir, build)


def with_instance_id(settings: Settings) -> Settings:
    """Settings with this process's unique, restart-stable instance id."""
    claimed = claim_instance_id(
        "processor", Path(settings.state_dir), settings.processor_instance_id
    )
    return settings.model_copy(update={"processor_instance_id": claimed})


def main() -> None:
    settings = with_instance_id(Settings())
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    tracing.configure(settings, "agentloom-processor")  # ALC_TRACE_EXPORTER (none: off)
    asyncio.run(prepare_infrastructure(settings))
    if settings.metrics_port is not None:
        serve(settings.metrics_port)  # a thread of its own, for either driver
    if settings.processor_driver == "aiokafka":
        asyncio.run(run_direct(settings))
        return
    from faust.worker import Worker

    worker = Worker(faust_app(settings), loglevel=settings.log_level.lower(), quiet=True)
    worker.execute_from_commandline()
