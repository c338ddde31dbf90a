"""Prepare's HTTP responses go out in one socket write (issue 37,
``services.prepare.http.one_write``): the header block waits for the body, and is never
lost or reordered when no body follows at once."""

from __future__ import annotations

import asyncio

import httpx
import uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from services.prepare.http.one_write import HeldHeaders, OneWriteProtocol


class Socket:
    """A transport that records each write it is asked for."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


HEADERS = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


async def test_the_header_block_goes_out_with_the_body() -> None:
    sock = Socket()
    t = HeldHeaders(sock)  # type: ignore[arg-type]
    t.write(HEADERS)
    t.write(b"{}")
    assert sock.writes == [HEADERS + b"{}"]
    await asyncio.sleep(0)
    assert sock.writes == [HEADERS + b"{}"]  # nothing held is written twice
    assert not t.is_closing()  # the rest is the transport's


async def test_a_header_block_alone_goes_out_at_the_loops_next_turn() -> None:
    sock = Socket()
    t = HeldHeaders(sock)  # type: ignore[arg-type]
    t.write(HEADERS)
    assert sock.writes == []
    await asyncio.sleep(0)
    assert sock.writes == [HEADERS]
    t.write(b"{}")
    assert sock.writes == [HEADERS, b"{}"]


async def test_closing_sends_what_is_held_first() -> None:
    sock = Socket()
    t = HeldHeaders(sock)  # type: ignore[arg-type]
    t.write(HEADERS)
    t.close()
    assert sock.writes == [HEADERS] and sock.closed


async def test_a_body_is_never_held() -> None:
    sock = Socket()
    t = HeldHeaders(sock)  # type: ignore[arg-type]
    t.write(b"0\r\n\r\n")  # a chunked body's end
    t.write(b"partial body\r\n\r\n")
    assert sock.writes == [b"0\r\n\r\n", b"partial body\r\n\r\n"]


async def test_a_server_on_the_protocol_answers_whole_and_streamed_responses() -> None:
    app = FastAPI()

    @app.get("/whole")
    async def whole() -> dict[str, int]:
        return {"n": 1}

    @app.get("/streamed")
    async def streamed() -> StreamingResponse:
        async def parts():  # type: ignore[no-untyped-def]
            for i in range(3):
                await asyncio.sleep(0.01)
                yield f"part {i};".encode()

        return StreamingResponse(parts(), media_type="text/plain")

    config = uvicorn.Config(app, host="127.0.0.1", port=0, http=OneWriteProtocol, log_level="error")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
            for _ in range(3):  # one connection, kept alive between responses
                r = await c.get("/whole")
                assert r.status_code == 200 and r.json() == {"n": 1}
            r = await c.get("/streamed")
            assert r.text == "part 0;part 1;part 2;"
    finally:
        server.should_exit = True
        await serving
