"""Entry point: ``agentloom-console`` (or ``python -m services.console``)."""

from __future__ import annotations

import logging

import uvicorn

from services.console.app import create_app
from services.console.settings import ConsoleSettings


def main() -> None:
    settings = ConsoleSettings()
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s %(message)s")
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=False,
    )


if __name__ == "__main__":
    main()
