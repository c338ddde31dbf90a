"""Entry point: ``agentloom-prepare`` (or ``python -m services.prepare``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import uvicorn
from fastapi import FastAPI

from schemas.settings import Settings
from services.prepare.bootstrap import running_service
from services.prepare.http.api import create_api
from services.prepare.http.one_write import OneWriteProtocol
from services.prepare.service import PrepareService
from streams.kafka.topics import require_topics
from streams.tuning.collector import tune_collector
from streams.tuning.cpu_policy import apply_cpu_policy


def build_app(settings: Settings) -> FastAPI:
    holder: dict[str, PrepareService] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with running_service(settings) as svc:
            holder["svc"] = svc
            app.state.service = svc
            yield

    # The routes need the service; create_api reads it lazily through a proxy.
    app = create_api(_Lazy(holder), settings)  # type: ignore[arg-type]
    app.router.lifespan_context = lifespan
    return app


class _Lazy:
    def __init__(self, holder: dict[str, PrepareService]) -> None:
        self._holder = holder

    def __getattr__(self, name: str) -> object:
        return getattr(self._holder["svc"], name)


def main() -> None:
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    tune_collector(settings.gc_young_threshold)
    apply_cpu_policy(settings.service_cpu)
    # Topics first, outside uvicorn: a failure in the ASGI lifespan is logged by uvicorn
    # and ends serve() normally (exit 0); here it stops the process with its code.
    asyncio.run(require_topics(settings, "prepare"))
    config = uvicorn.Config(
        build_app(settings),
        host=settings.prepare_host,
        port=settings.prepare_port,
        log_level=settings.log_level.lower(),
        access_log=False,
        loop="uvloop",
        http=OneWriteProtocol,
    )
    server = uvicorn.Server(config)
    server.run()  # on the loop the config names
    if not server.started:
        raise SystemExit(3)  # uvicorn's own code for a failed start-up


if __name__ == "__main__":
    main()
