"""Composition root of the session processor process: settings, the PostgreSQL pool, the
Kafka publisher and the ``BatchProcessor`` (wired by ``streams.wiring``, shared with the
offload worker) are built for either driver (faust, the default, or aiokafka directly).
The drivers (``streams.drivers.app``, ``streams.drivers.direct``) only move batches;
``python -m streams`` calls ``main``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import asyncpg
import faust
import uvloop

from schemas.settings import Settings
from storage.migrate import apply_dsn
from storage.roles import configured_dsn
from streams import tracing
from streams.crash_only import exit_for_redelivery, handle_or_exit
from streams.drivers import direct
from streams.drivers.app import BatchHandler, create_app
from streams.drivers.offload import OffloadedProcessor, handle_offloaded_or_exit
from streams.drivers.small_at_home import SmallAtHome
from streams.instance import claim_instance_id
from streams.kafka.auth import kafka_auth
from streams.kafka.publish import AiokafkaPublisher, FaustPublisher
from streams.kafka.topics import require_topics
from streams.metrics import serve
from streams.tuning.collector import tune_collector
from streams.tuning.cpu_policy import apply_cpu_policy
from streams.wiring import build_processor, open_pool

log = logging.getLogger("agentloom.processor")

FAUST_DATA_DIR = Path(".state/faust")


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
            offloaded = partial(handle_offloaded_or_exit, worker)
            return await with_small_at_home(settings, offloaded, lambda: _in_process(app))
        return await _in_process(app)

    async def _in_process(app: faust.App) -> BatchHandler:
        proc = build_processor(settings, await pool_or_exit(settings), FaustPublisher(app))
        return lambda batch: handle_or_exit(proc, batch, settings.processor_transient_retry_s)

    return create_app(settings, data_dir, build)


async def with_small_at_home(
    settings: Settings, offloaded: BatchHandler, home: Callable[[], Awaitable[BatchHandler]]
) -> BatchHandler:
    """The offloaded handler, with batches under ``processor_offload_from`` messages
    applied in this process (``home()`` builds that processor) unless it is 1."""
    if settings.processor_offload_from <= 1:
        return offloaded
    return SmallAtHome(await home(), offloaded, settings.processor_offload_from)


async def pool_or_exit(settings: Settings) -> asyncpg.Pool:
    """The faust process's own pool. It is opened inside faust's agent (at its start, or
    with the first batch): an exception there would reach faust, which acks the batch
    it was taking. Without a pool the process exits instead, as the child does, and
    starts again (crash-only)."""
    try:
        return await open_pool(settings)
    except Exception:
        exit_for_redelivery("the processor's database pool could not be opened")


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
    tune_collector(settings.gc_young_threshold)
    apply_cpu_policy(settings.service_cpu)
    asyncio.run(prepare_infrastructure(settings))
    if settings.metrics_port is not None:
        serve(settings.metrics_port)  # a thread of its own, for either driver
    if settings.processor_driver == "aiokafka":
        uvloop.run(run_direct(settings))
        return
    from faust.worker import Worker

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())  # the loop faust's Worker makes
    worker = Worker(faust_app(settings), loglevel=settings.log_level.lower(), quiet=True)
    worker.execute_from_commandline()
