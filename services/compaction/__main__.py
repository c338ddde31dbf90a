"""Entry point: ``agentloom-compaction`` (or ``python -m services.compaction``).

Its own consumer group on ``ctx.compaction.requests``: jobs are handled one at a time per
partition and the offset is committed only after the outcome was saved and published, so
a crash re-runs the job — which then finds its saved candidate (R15.3).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from schemas.errors import InvalidEvent
from schemas.wire import decode_compaction_request
from services.compaction.extractive import ExtractiveSummarizer
from services.compaction.gateway import SummaryGateway
from services.compaction.hooks import HookChain
from services.compaction.openai_compat import OpenAICompatibleSummarizer
from services.compaction.worker import CompactionWorker, WorkerConfig
from services.core.tokens import CachedCounter, make_counter
from services.settings import Settings
from services.topics import require_topics
from storage.migrate import apply_dsn
from storage.pool import create_pool

log = logging.getLogger("agentloom.compaction")


def make_gateway(settings: Settings) -> SummaryGateway:
    if settings.summarizer == "openai":
        if not (settings.summarizer_base_url and settings.summarizer_model):
            raise SystemExit(
                "ALC_SUMMARIZER=openai needs ALC_SUMMARIZER_BASE_URL and ALC_SUMMARIZER_MODEL"
            )
        return OpenAICompatibleSummarizer(
            settings.summarizer_base_url,
            settings.summarizer_model,
            settings.summarizer_api_key,
            settings.summarizer_timeout_s,
        )
    return ExtractiveSummarizer()


def load_hooks(spec: str) -> HookChain:
    """``module:factory`` entries; each factory returns a ``CompactHook``."""
    hooks = []
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        module, _, attr = entry.partition(":")
        hook = getattr(importlib.import_module(module), attr)()
        log.info("compact hook %s@%s loaded from %s", hook.name, hook.version, entry)
        hooks.append(hook)
    return HookChain(tuple(hooks))


async def run(settings: Settings) -> None:
    await apply_dsn(settings.pg_dsn)
    await require_topics(settings)  # requests in, records out: exit before joining if wrong
    pool = await create_pool(settings.pg_dsn, 1, 4)
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap, acks="all", enable_idempotence=True
    )
    consumer = AIOKafkaConsumer(
        settings.topic_compaction_requests,
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=settings.compaction_group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=16,
        group_instance_id=f"{settings.compaction_group}-{settings.processor_instance_id}",
        session_timeout_ms=int(settings.processor_session_timeout_s * 1000),
        # A job may take minutes with a real model; don't get evicted meanwhile.
        max_poll_interval_ms=30 * 60 * 1000,
    )
    await producer.start()
    await consumer.start()
    worker = CompactionWorker(
        pool,
        producer,
        make_gateway(settings),
        CachedCounter(make_counter("cl100k_base", settings.tiktoken_file)),
        WorkerConfig(
            settings.topic_records,
            settings.compaction_segment_tokens,
            settings.compaction_output_tokens,
            settings.summarizer_timeout_s * 3,
            crash_after_save=os.environ.get("ALC_FAULT_CRASH_AFTER_SAVE") == "1",
        ),
        load_hooks(settings.compaction_hooks),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("[compaction]: Ready, consuming %s", settings.topic_compaction_requests)
    try:
        while not stop.is_set():
            fetched = await consumer.getmany(timeout_ms=200)
            for tp, msgs in fetched.items():
                for m in msgs:
                    try:
                        req = decode_compaction_request(m.value)
                    except InvalidEvent as exc:
                        log.error(
                            "unreadable compaction request at %s:%d: %s", tp, m.offset, exc.message
                        )
                        continue
                    await _handle_or_exit(worker, req)
                await consumer.commit({tp: msgs[-1].offset + 1})
    finally:
        await consumer.stop()
        await producer.stop()
        await pool.close()


async def _handle_or_exit(worker: CompactionWorker, req: object) -> None:
    from schemas.wire import CompactionRequest

    assert isinstance(req, CompactionRequest)
    for attempt in range(1, 4):
        try:
            await worker.handle(req)
            return
        except Exception:
            log.exception("job %s failed (attempt %d/3)", req.job_id, attempt)
            await asyncio.sleep(0.5 * attempt)
    logging.shutdown()
    os._exit(70)  # uncommitted: the job is redelivered after restart


def main() -> None:
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    asyncio.run(run(settings))


if __name__ == "__main__":
    main()
