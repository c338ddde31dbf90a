"""Prepare's HTTP API as the console uses it: every call carries the user's API key, so
Prepare decides scope and grants exactly as for any other client (R15.4)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx


class PrepareError(Exception):
    """A refusal or failure from Prepare, with its status and error body."""

    def __init__(self, status: int, error: dict[str, Any]) -> None:
        super().__init__(error.get("message") or f"HTTP {status}")
        self.status = status
        self.code = str(error.get("code") or f"http_{status}")
        self.message = str(error.get("message") or "")
        self.details: dict[str, Any] = dict(error.get("details") or {})


def _seg(value: str) -> str:
    """One path segment, whatever it holds: ``/``, ``?``, ``#`` and ``%`` are quoted, so an
    id can never name another route of Prepare's (callers refuse ``.`` and ``..``)."""
    return quote(value, safe="")


class PrepareClient:
    def __init__(self, base_url: str, timeout_s: float = 30.0) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout_s)

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, key: str, **kwargs: Any) -> dict[str, Any]:
        try:
            r = await self._http.request(
                method, path, headers={"Authorization": f"Bearer {key}"}, **kwargs
            )
        except httpx.HTTPError as exc:  # unreachable or slow: the page says so, no 500
            error = {"code": "prepare_unavailable", "message": type(exc).__name__}
            raise PrepareError(503, error) from exc
        try:
            body = r.json()
        except ValueError:
            body = {}
        if r.status_code >= 400:
            raise PrepareError(
                r.status_code, body.get("error") or {} if isinstance(body, dict) else {}
            )
        return body if isinstance(body, dict) else {"value": body}

    async def release(self, key: str, release_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/v1/releases/{_seg(release_id)}", key)

    async def publish(self, key: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call("POST", "/v1/releases", key, json=body)

    async def session(self, key: str, session_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/v1/sessions/{_seg(session_id)}", key)

    async def read_record(
        self, key: str, session_id: str, record_id: str, offset: int, limit: int
    ) -> dict[str, Any]:
        return await self._call(
            "GET",
            f"/v1/sessions/{_seg(session_id)}/records/{_seg(record_id)}",
            key,
            params={"offset": offset, "limit": limit},
        )

    async def rollups(self, key: str) -> dict[str, Any]:
        return await self._call("GET", "/v1/analytics/rollups", key, params={"limit": 200})
