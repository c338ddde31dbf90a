"""The diagnostics view of one model call (R18): what its context kept,
summarized (with the summary id), externalized, and why, with the readable source refs
and the budget items — the one view the console and ``agentloom session inspect`` show
(``domain.context.call_view`` over ``storage.inspection``), found by a call or prepared id. The
blocks are those stored when the call was made, with the role each was
sent with; ``rebuilt: true`` marks a call recorded before views were stored."""

from __future__ import annotations

from collections import Counter
from typing import Any

from fastapi import FastAPI

from domain.auth import Action, Principal
from domain.context.call_view import CallView
from schemas.answers.diagnostics import Diagnostics
from schemas.errors import NotFound
from services.prepare.fields import PathId
from services.prepare.service import PrepareService
from storage import inspection
from storage.calls import views as call_views


def diagnostics(session_id: str, view: CallView) -> Diagnostics:
    """The call view, each source record with its read-back reference (the
    ``read_content`` ref and the paged read route), the blocks' ids by decision and the
    summary in effect."""
    out = view.to_dict()
    out["session_id"] = session_id
    for b in out["blocks"]:
        rid = b["record_id"]
        b["read_back"] = (
            None
            if rid is None
            else {"ref": f"rec:{rid}", "path": f"/v1/sessions/{session_id}/records/{rid}"}
        )
    out["decisions"] = dict(Counter(b.decision for b in view.blocks))
    by: dict[str, list[str]] = {}
    for blk in view.blocks:
        by.setdefault(blk.decision, []).append(blk.block_id)
    out["by_decision"] = by
    return Diagnostics.model_validate(out)


def diagnostics_routes(app: FastAPI, svc: PrepareService, auth: Any) -> None:
    """Diagnostics of a model call, scope- and grant-checked like the session's reads."""

    @app.get("/v1/diagnostics/{call_or_prepared_id}")
    async def call_diagnostics(call_or_prepared_id: PathId, who: Principal = auth) -> Diagnostics:
        """R18: for a model call id, or the id of the prepared context the gateway checked
        it for: every block in order (role, category, retention, tokens, ``decision`` kept
        / summarized / externalized and its ``reason``), each source record's
        ``read_back`` reference, the summary chain with covered ranges, and the budget
        items as shares of the InputBudget. A call of a session the key may not read is
        refused like the session itself (404 in another space, 403 without a grant)."""
        unknown = NotFound(f"model call {call_or_prepared_id} not found")
        found = await inspection.call_of(svc.pool, call_or_prepared_id)
        if found is None:
            raise unknown
        session_id, call_id = found
        try:  # the call's session by its global id (not a name the caller's space uses)
            await svc.access.authorize(session_id, who, Action.SESSION_READ, global_id=True)
        except NotFound:
            # Another space's call is unknown, as one nobody made — the answer
            # names only what the caller sent, never the session it belongs to.
            raise unknown from None
        view = await call_views.view_of(svc.pool, session_id, call_id)
        if view is None:  # never expected: the row was just found
            raise unknown
        return diagnostics(session_id, view)
