"""Entry point: ``agentloom-compaction`` (or ``python -m services.compaction``).

Its own consumer group on ``ctx.compaction.requests``, shared by any number of these
processes: each runs up to ``ALC_COMPACTION_CONCURRENCY`` jobs at once, a session's in
order, and commits a partition's offset only up to its first request whose outcome is not
yet saved and published, so a crash re-runs the job — which then finds its saved
candidate (R15.3). No request stalls
its partition: unreadable ones are dead-lettered, and one that keeps making the worker
raise is quarantined (``requests.RequestLoop``); transient infrastructure errors are
retried. The wiring is in ``bootstrap``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

import uvloop

from schemas.settings import Settings
from services.compaction import bootstrap
from services.compaction.consume import consume_until
from streams import tracing
from streams.tuning.collector import tune_collector
from streams.tuning.cpu_policy import apply_cpu_policy

log = logging.getLogger("agentloom.compaction")


async def run(settings: Settings) -> None:
    # R18: each summarizer call a model answers is a GenAI span (ALC_TRACE_EXPORTER).
    tracing.configure(settings, "agentloom-compaction")
    service = await bootstrap.start(settings)
    # What startup built (modules, the tokenizer, the clients) lives as long as the
    # process: out of every later collection, so that a full one scans only what jobs
    # keep (their caches) — over startup's heap each took ~0.1 s, every few jobs.
    gc.collect()
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("[compaction]: Ready, consuming %s", settings.topic_compaction_requests)
    try:
        await consume_until(stop, service.consumer, service.jobs, settings.compaction_group)
    finally:
        await service.close()


def main() -> None:
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    tune_collector(settings.gc_young_threshold)
    apply_cpu_policy(settings.service_cpu)
    uvloop.run(run(settings))


if __name__ == "__main__":
    main()
