"""Context inspector (R18, R4.2, R10.3): sessions → runs → model calls; for one call the
blocks in order, the budget items against InputBudget, decisions and reasons, the summary
chain with covered ranges, and source links read back, paged, through Prepare."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from domain.policy import LargeResultSettings
from services.console import blocks
from services.console.context import Refused, Viewer, console_of, page, require_session, viewer
from services.console.prepare_client import PrepareError
from storage import console_reads

router = APIRouter()
PAGE_CHARS = 2000  # one page of a read-back


@router.get("/inspector")
async def sessions(request: Request, v: Viewer = Depends(viewer)) -> Response:  # noqa: B008
    rows = await console_reads.visible_sessions(
        console_of(request).pool, v.who.space_id, v.who.actor_id
    )
    return page(request, "sessions.html", viewer=v, sessions=rows)


@router.get("/inspector/sessions/{session_id}")
async def session(
    request: Request,
    session_id: str,
    v: Viewer = Depends(viewer),  # noqa: B008
) -> Response:
    c = console_of(request)
    info = await require_session(c, v, session_id)
    return page(
        request,
        "session.html",
        viewer=v,
        session=info,
        session_id=session_id,
        runs=await console_reads.runs(c.pool, session_id),
        calls=await console_reads.model_calls(c.pool, session_id),
    )


@router.get("/inspector/sessions/{session_id}/calls/{call_id}")
async def call(
    request: Request,
    session_id: str,
    call_id: str,
    v: Viewer = Depends(viewer),  # noqa: B008
) -> Response:
    c = console_of(request)
    await require_session(c, v, session_id)
    row = await console_reads.model_call(c.pool, session_id, call_id)
    if row is None:
        raise Refused(404, "not_found", f"model call {call_id} not found")
    deps = row["dependency_versions"] or {}
    records = await console_reads.call_records(
        c.pool, session_id, row["run_id"], row["instance_id"], deps
    )
    chain = await console_reads.summary_chain(c.pool, session_id, deps.get("summary_id"))
    inline = await _inline_max_tokens(request, v, deps.get("release_id"))
    return page(
        request,
        "call.html",
        viewer=v,
        session_id=session_id,
        call=row,
        blocks=blocks.call_blocks(row, records, chain, inline),
        bar=blocks.budget_bar(row["budget"] or {}),
        chain=chain,
    )


async def _inline_max_tokens(request: Request, v: Viewer, release_id: str | None) -> int:
    """The release's large-result rule (R10.3); the platform default when unreadable."""
    default = LargeResultSettings().inline_max_tokens
    if not release_id:
        return default
    try:
        rel = await console_of(request).prepare.release(v.key, release_id)
    except PrepareError:
        return default
    section = (rel.get("context_policy") or {}).get("large_result") or {}
    return int(section.get("inline_max_tokens") or default)


@router.get("/inspector/sessions/{session_id}/records/{record_id}")
async def read_back(
    request: Request,
    session_id: str,
    record_id: str,
    offset: int = 0,
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
