"""Prometheus for the Prepare service: ``agentloom_http_requests_total`` by route template
(never the raw path: ids would make a series per session) and status."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.metrics import HTTP_REQUESTS


class RequestMetrics:
    """Outermost ASGI middleware: counts every answer, the shielded 500s included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            HTTP_REQUESTS.labels(route, str(status)).inc()
