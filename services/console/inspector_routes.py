"""Context inspector (R18, R4.2, R10.3): sessions → runs → model calls, and the decisions
and questions recorded in a session (open or closed); for one call the blocks in order,
the budget items against InputBudget, decisions and reasons, the summary chain with
covered ranges, and source links read back, paged, through Prepare."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from domain.context.call_view import session_cost
from services.console.context import Refused, Viewer, console_of, page, require_session, viewer
from services.console.fields import RESPONSES, Offset, PathId
from services.console.prepare_client import PrepareError
from services.prepare.http.errors import ApiRoute
from storage import inspection
from storage.calls import views as call_views
from storage.compaction import diagnostics
from storage.records.authored import session_authored

router = APIRouter(route_class=ApiRoute, responses=RESPONSES)
PAGE_CHARS = 2000  # one page of a read-back


@router.get("/inspector")
async def sessions(request: Request, v: Viewer = Depends(viewer)) -> Response:  # noqa: B008
    rows = await inspection.visible_sessions(
        console_of(request).pool, v.who.space_id, v.who.actor_id
    )
    return page(request, "sessions.html", viewer=v, sessions=rows)


@router.get("/inspector/sessions/{session_id}")
async def session(
    request: Request,
    session_id: PathId,
    v: Viewer = Depends(viewer),  # noqa: B008
) -> Response:
    c = console_of(request)
    info = await require_session(c, v, session_id)
    listed = await inspection.calls(c.pool, session_id)
    return page(
        request,
        "session.html",
        viewer=v,
        session=info,
        session_id=session_id,
        runs=await inspection.runs(c.pool, session_id),
        calls=listed,
        totals=session_cost(x.cost for x in listed),
        authored=await session_authored(c.pool, session_id),
        open_calls=await diagnostics.open_calls(c.pool, session_id),
        jobs=await diagnostics.recent_jobs(c.pool, session_id),
    )


@router.get("/inspector/sessions/{session_id}/calls/{call_id}")
async def call(
    request: Request,
    session_id: PathId,
    call_id: PathId,
    v: Viewer = Depends(viewer),  # noqa: B008
) -> Response:
    """R18: the same view of the call as ``agentloom session inspect --call``."""
    c = console_of(request)
    await require_session(c, v, session_id)
    view = await call_views.view_of(c.pool, session_id, call_id)
    if view is None:
        raise Refused(404, "not_found", f"model call {call_id} not found")
    return page(request, "call.html", viewer=v, session_id=session_id, view=view)


@router.get("/inspector/sessions/{session_id}/records/{record_id}")
async def read_back(
    request: Request,
    session_id: PathId,
    record_id: PathId,
    offset: Offset = 0,
    v: Viewer = Depends(viewer),  # noqa: B008
) -> Response:
    """R10.3: the source read back through Prepare's paged API with the viewer's key —
    Prepare checks scope and grant again for every page."""
    c = console_of(request)
    await require_session(c, v, session_id)
    try:
        got = await c.prepare.read_record(v.key, session_id, record_id, max(0, offset), PAGE_CHARS)
    except PrepareError as exc:
        raise Refused(exc.status, exc.code, exc.message) from exc
    return page(
        request,
        "record.html",
        viewer=v,
        session_id=session_id,
        record_id=record_id,
        got=got,
        offset=max(0, offset),
        page_chars=PAGE_CHARS,
    )
