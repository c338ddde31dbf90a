"""uvicorn's httptools protocol, each response sent in one socket write.

uvicorn writes a response's status line and headers, then its body, each at once: two
``write`` calls a response, and the client is woken for the headers alone, then again
for the body. Here the header block waits for what follows it (the body, in the same
step of the loop), and goes out by itself only if nothing follows before the loop's
next turn (a streamed body whose first part is not ready)."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class HeldHeaders:
    """A transport that holds a response's header block until the next write (or the
    loop's next turn, or ``close``), and sends both together."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held = b""

    def write(self, data: bytes) -> None:
        if self._held:
            data, self._held = self._held + data, b""
        elif data.startswith(b"HTTP/") and data.endswith(b"\r\n\r\n"):
            self._held = data
            asyncio.get_running_loop().call_soon(self.flush)
            return
        self._transport.write(data)

    def flush(self) -> None:
        if self._held:
            held, self._held = self._held, b""
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` over ``HeldHeaders``: ``uvicorn.Config(http=...)``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(HeldHeaders(transport))  # type: ignore[arg-type]
