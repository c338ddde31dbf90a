"""Operational routes of the Prepare API: health, metrics and the analytics rollups (R18)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from domain.auth import KeyKind, Principal
from schemas.answers.ops import Distribution, Health, Rollups
from schemas.errors import InvalidRequest, NotFound, NotGranted
from services.prepare.fields import QueryId
from services.prepare.service import PrepareService
from storage import analytics


def _utc(at: datetime | None) -> datetime | None:
    """A naive time is UTC; one PostgreSQL cannot hold is a 422, not a 500."""
    if at is None:
        return None
    try:
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    except (OverflowError, ValueError) as exc:
        raise InvalidRequest(f"time out of range: {at!r}") from exc


def ops_routes(app: FastAPI, svc: PrepareService, auth: Any) -> None:
    """Health check and metrics (no key), analytics rollups (host keys)."""

    @app.get("/healthz")
    async def healthz() -> Health:
        return Health(status="ok")

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        """Prometheus exposition; like the health check, no key (scrapers have none)."""
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    # Only the fields a row has: ``cache_share`` and ``cost`` belong to their metrics' rows.
    @app.get("/v1/analytics/rollups", response_model_exclude_unset=True)
    async def analytics_rollups(
        window: Literal["1m", "1h"] = "1m",
        start: Annotated[
            datetime | None, Query(alias="from", description="first window start (inclusive)")
        ] = None,
        end: Annotated[
            datetime | None, Query(alias="to", description="last window start (exclusive)")
        ] = None,
        space: QueryId = None,
        agent: QueryId = None,
        purpose: QueryId = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
        who: Principal = auth,
    ) -> Rollups:
        """R18 rollups of the key's tenant space (host keys only: they span every actor),
        per tumbling window (event time) and agent / release / model / purpose: prepares,
        estimated input tokens, refusals by reason, trigger checks by decision,
        compactions by outcome and reason, tokens before/after/saved, summarizer calls,
        model calls and usage, dead letters by reason (``metric`` + ``label``);
        ``distributions``: count, sum, p50 and p95 of the ``*_hist`` rows (within 2%)."""
        if space is not None and space != who.space_id:
            raise NotFound(f"space {space} not found")
        if who.credential.kind is not KeyKind.HOST:
            raise NotGranted("analytics span every actor of a space: host keys only")
        rows = await analytics.query(
            svc.pool, window, who.space_id, _utc(start), _utc(end), agent, purpose, limit + 1
        )
        shown = rows[:limit]
        given = [r.model_dump(exclude_unset=True) for r in shown]
        return Rollups(
            window=window,
            space_id=who.space_id,
            rows=shown,
            distributions=[Distribution.model_validate(d) for d in analytics.distributions(given)],
            truncated=len(rows) > limit,
        )
