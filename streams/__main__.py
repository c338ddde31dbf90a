"""Entry point: ``agentloom-processor`` (or ``python -m streams``)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from schemas.settings import Settings
from storage.migrate import apply_dsn
from streams.app import create_app
from streams.topics import require_topics


async def _prepare_infrastructure(settings: Settings) -> None:
    await apply_dsn(settings.pg_dsn)
    # Every topic the processor reads or writes (records in; committed, dead letters,
    # compaction requests, observability out) exists with our partition count, or the
    # process stops here — before faust or aiokafka joins the group.
    await require_topics(settings)


def main() -> None:
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    asyncio.run(_prepare_infrastructure(settings))
    if settings.processor_driver == "aiokafka":
        from streams import direct

        asyncio.run(direct.run(settings))
        return
    app = create_app(settings, Path(".state/faust"))
    from faust.worker import Worker

    worker = Worker(app, loglevel=settings.log_level.lower(), quiet=True)
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
