"""The scale test's client-side balancing over several Prepare instances (issue 13).

Each session has a home instance (session index modulo the number of instances), so the
load is spread over all of them; a request that cannot reach its instance (connection
refused or not accepted in time: killed, restarting) goes to the next one instead, and
back home once home answers again. A request already sent is never re-sent here: its
failure goes up to the load's retry, whose next attempt fails over like any other.

Prepared contexts live in the memory of the instance that prepared them (for now), so a
model call after a fail-over can get ``prepared_not_found``; the load answers that by
preparing again (``benchmarks.soak_load``).

``Tally`` counts, per instance, the prepares and model-call checks it answered.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import httpx


@dataclass
class Tally:
    names: list[str]
    prepares: Counter[str] = field(default_factory=Counter)
    model_calls: Counter[str] = field(default_factory=Counter)
    failovers: int = 0  # requests sent to another instance than the session's home

    def answered(self, name: str, request: httpx.Request, status: int) -> None:
        if request.method != "POST" or not 200 <= status < 300:
            return
        path = request.url.path
        if path.endswith("/prepare"):
            self.prepares[name] += 1
        elif path.endswith("/model-calls"):
            self.model_calls[name] += 1

    def row(self) -> dict[str, dict[str, int]]:
        return {
            n: {"prepares": self.prepares[n], "model_calls": self.model_calls[n]}
            for n in self.names
        }


class FailoverTransport(httpx.AsyncBaseTransport):
    """Sends each request to the first reachable of ``backends`` (name -> ``host:port``),
    starting from the ``home``-th."""

    def __init__(self, backends: dict[str, str], home: int, tally: Tally) -> None:
        items = list(backends.items())
        k = home % len(items)
        self.order = items[k:] + items[:k]
        self.tally = tally
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        last: httpx.TransportError | None = None
        for i, (name, address) in enumerate(self.order):
            host, _, port = address.rpartition(":")
            request.url = request.url.copy_with(host=host, port=int(port))
            request.headers["Host"] = address
            try:
                response = await self.inner.handle_async_request(request)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                # Nothing was sent: safe to try the next instance with the same request.
                last = exc
                continue
            self.tally.failovers += i > 0
            self.tally.answered(name, request, response.status_code)
            return response
        assert last is not None
        raise last

    async def aclose(self) -> None:
        await self.inner.aclose()
