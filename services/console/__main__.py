"""Entry point: ``agentloom-console`` (or ``python -m services.console``)."""

from __future__ import annotations

import logging

from services.console.app import create_app
from services.console.server import serve
from services.console.settings import ConsoleSettings


def main() -> None:
    settings = ConsoleSettings()
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s %(message)s")
    started = serve(
        create_app(settings),
        settings.host,
        settings.port,
        request_timeout_s=settings.request_timeout_s,
        keep_alive_s=settings.keep_alive_s,
        max_header_bytes=settings.max_header_bytes,
        max_connections=settings.max_connections,
    )
    if not started:
        raise SystemExit(3)  # uvicorn's own code for a failed start-up


if __name__ == "__main__":
    main()
