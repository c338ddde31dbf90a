"""The SDK's HTTP calls (services/sdk/http.py): JSON bodies, the proxy read once, and one
keep-alive connection reused by calls in a row."""

from __future__ import annotations

import asyncio
import json

import pytest

from schemas.errors import ApiError
from services.sdk.http import AiohttpCalls, json_body, proxy_for


def test_json_bodies_read_back_as_json_writes_them() -> None:
    value = {"a": [1, 2.5, None, True], "text": "é\u2028", 3: "int key"}
    assert json.loads(json_body(value)) == json.loads(json.dumps(value))
    big = {"n": 1 << 70}  # over 64 bits: orjson refuses it, json writes it
    assert json.loads(json_body(big)) == big


def test_the_environments_proxy_is_used_unless_the_host_is_excluded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    assert proxy_for("http://prepare.internal:8000") is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    assert proxy_for("http://prepare.internal:8000") == "http://proxy:3128"
    monkeypatch.setenv("NO_PROXY", "prepare.internal")
    assert proxy_for("http://prepare.internal:8000") is None


async def test_calls_in_a_row_share_one_connection() -> None:
    peers: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername")[1])
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = next(
                (
                    int(h.split(b":")[1])
                    for h in head.split(b"\r\n")
                    if h.lower().startswith(b"content-length:")
                ),
                0,
            )
            body = await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    calls = AiohttpCalls(f"http://127.0.0.1:{port}/", {"Authorization": "Bearer k"})
    try:
        answers = [await calls.request("POST", "/v1/x", body=b'{"i":%d}' % i) for i in range(3)]
    finally:
        await calls.aclose()
        server.close()
    assert [(a.status, a.body) for a in answers] == [(200, b'{"i":%d}' % i) for i in range(3)]
    assert len(peers) == 1


def test_all_proxy_serves_a_scheme_without_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setenv("ALL_PROXY", "http://all:3128")
    assert proxy_for("https://prepare.internal") == "http://all:3128"
    monkeypatch.setenv("HTTPS_PROXY", "http://tls:3128")
    assert proxy_for("https://prepare.internal") == "http://tls:3128"


async def test_an_answer_that_is_not_http_is_a_bad_response_not_retried() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    calls = AiohttpCalls(f"http://127.0.0.1:{port}", None)
    try:
        with pytest.raises(ApiError) as caught:
            await calls.request("GET", "/v1/health")
        assert caught.value.code == "bad_response" and not caught.value.retriable
    finally:
        await calls.aclose()
        server.close()
        await server.wait_closed()
