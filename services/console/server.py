"""The console's HTTP server: uvicorn with h11, bounded in time and size.

uvicorn's ``timeout_keep_alive`` only closes a connection idle *between* requests, and
every byte received disarms it: a client that sends half a request line, or trickles
its headers a byte at a time, held a connection forever. ``DeadlineH11`` gives every
request a deadline to arrive whole (line, headers and body) from the moment the
connection can send it; past it the connection is closed. It is disarmed once the
request is complete, so a slow answer of ours is never cut.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

_RECEIVED = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR, h11.SWITCHED_PROTOCOL)


class DeadlineH11(H11Protocol):
    request_timeout_s: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state in _RECEIVED:
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # A kept-alive connection waits for its next request: a new deadline for it
        # (uvicorn's keep-alive timer closes it sooner if nothing at all arrives).
        if not self.transport.is_closing() and self.conn.their_state not in _RECEIVED:
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing() and self.conn.their_state not in _RECEIVED:
            self.logger.info("request not received within %.0fs: closed", self.request_timeout_s)
            self.transport.close()


def serve(
    app: Any,
    host: str,
    port: int,
    *,
    request_timeout_s: float,
    keep_alive_s: float,
    max_header_bytes: int,
    max_connections: int,
) -> bool:
    """Run until stopped; False when the server could not start (as Prepare's main)."""
    protocol = type("ConsoleH11", (DeadlineH11,), {"request_timeout_s": request_timeout_s})
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        timeout_keep_alive=max(1, round(keep_alive_s)),
        h11_max_incomplete_event_size=max_header_bytes,
        limit_concurrency=max_connections,
        log_level="info",
        access_log=False,
    )
    server = uvicorn.Server(config)
    asyncio.run(server.serve())
    return bool(server.started)
