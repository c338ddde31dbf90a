"""The SDK's HTTP calls to Prepare: one request in, the status and body bytes out, and
every failure without an answer as ``ApiError`` (``timeout``, ``unavailable``,
``bad_response``).

``AiohttpCalls`` is the SDK's own: aiohttp's pooled keep-alive connections cost ~0.1 ms
of the runtime's CPU a call where httpx's cost ~0.7 ms (and ~1.5 ms with 16 calls at
once: its pool walks every connection for each request) — measured against one local
server, the agent's step makes one to two. ``HttpxCalls`` serves an injected httpx
transport (an in-process app, in tests). Bodies are written and read by orjson
(``json_body``).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
import httpx
import orjson

from schemas.errors import ApiError

TIMEOUT_S = 30.0
# Below uvicorn's keep-alive (5 s): the client drops an idle connection before the
# server closes it, so no request is written to a connection being closed.
KEEPALIVE_S = 4.0

Params = Mapping[str, str | int]


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class HttpCalls(Protocol):
    base_url: str
    headers: dict[str, str]  # sent with every call (the API key)
    timeout: float

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: Params | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpAnswer:
        """One call; no answer at all raises ``ApiError`` (status 0)."""

    async def aclose(self) -> None: ...


def json_body(value: Any) -> bytes:
    """``value`` as JSON: orjson (non-string keys written as strings, as ``json`` does);
    what orjson cannot write (an int over 64 bits) by ``json``."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP_PROXY``/``HTTPS_PROXY``, else
    ``ALL_PROXY``; none for a host in ``NO_PROXY``), as httpx reads it."""
    parts = urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    found = urllib.request.getproxies()
    return found.get(parts.scheme) or found.get("all")


def _failed(what: str, code: str, exc: BaseException, retriable: bool) -> ApiError:
    return ApiError.of(0, code, f"{what}: {exc!r}", retriable)


class AiohttpCalls:
    """Calls over aiohttp; the session is opened by the first call (inside the loop)."""

    def __init__(self, base_url: str, headers: Mapping[str, str] | None) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self.timeout = TIMEOUT_S
        self._session: aiohttp.ClientSession | None = None

    def _opened(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
            # The environment's proxy is read here, once (aiohttp's trust_env reads it,
            # and ~/.netrc, in a thread for every request).
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self.headers, proxy=proxy_for(self.base_url)
            )
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: Params | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpAnswer:
        what = f"{method} {path}"
        # Every phase bounded, as httpx's timeout is: name resolution and the connection
        # (``connect``), a stalled upload or answer (``total``), each read (``sock_read``).
        timeout = aiohttp.ClientTimeout(
            total=self.timeout, connect=self.timeout, sock_read=self.timeout
        )
        try:
            async with self._opened().request(
                method,
                self.base_url + path,
                data=body,
                params=params,
                headers=headers,
                timeout=timeout,
                allow_redirects=False,  # as httpx: a redirect is an answer
            ) as r:
                return HttpAnswer(r.status, await r.read())
        except TimeoutError as exc:
            raise ApiError.of(0, "timeout", f"{what}: no answer in time ({exc!r})", True) from exc
        except aiohttp.ClientResponseError as exc:
            # an answer came that is not HTTP (a bad status line or header): asking again
            # would get the same
            raise _failed(what, "bad_response", exc, False) from exc
        except (aiohttp.ClientError, OSError) as exc:  # refused, reset, dropped mid-answer
            raise _failed(what, "unavailable", exc, True) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class HttpxCalls:
    """Calls through an httpx transport (``ContextClient``'s ``http_transport``)."""

    def __init__(
        self, base_url: str, headers: Mapping[str, str] | None, transport: httpx.AsyncBaseTransport
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self.timeout = TIMEOUT_S
        self.client = httpx.AsyncClient(
            base_url=base_url, headers=self.headers, transport=transport
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: Params | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpAnswer:
        what = f"{method} {path}"
        try:
            r = await self.client.request(
                method, path, content=body, params=params, headers=headers, timeout=self.timeout
            )
        except httpx.TimeoutException as exc:
            raise ApiError.of(0, "timeout", f"{what}: no answer in time ({exc!r})", True) from exc
        except httpx.TransportError as exc:  # refused, reset, dropped mid-answer
            raise _failed(what, "unavailable", exc, True) from exc
        except httpx.RequestError as exc:  # an answer that cannot be decoded
            raise _failed(what, "bad_response", exc, False) from exc
        return HttpAnswer(r.status_code, r.content)

    async def aclose(self) -> None:
        await self.client.aclose()


def http_calls(
    base_url: str,
    headers: Mapping[str, str] | None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> HttpCalls:
    return (
        AiohttpCalls(base_url, headers)
        if transport is None
        else HttpxCalls(base_url, headers, transport)
    )
