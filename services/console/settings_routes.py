"""Settings → Context compaction (R17, R7.7): the overrides form, live validation beside
each field (a small JSON endpoint), the effective policy with provenance, InputBudget and
thresholds per purpose, a dry run for a session, and publish through Prepare."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from domain.policy import validate_policy
from schemas.errors import InvalidPolicy
from services.console import preview
from services.console.context import (
    Console,
    Refused,
    Viewer,
    console_of,
    page,
    require_session,
    viewer,
)
from services.console.prepare_client import PrepareError
from storage import console_reads

router = APIRouter()
PATH = "/settings/context-compaction"
# The release fields a new release copies from the one it is based on (POST /v1/releases).
RELEASE_FIELDS = (
    "agent_id",
    "instructions",
    "tool_catalog",
    "skill_bindings",
    "hook_bindings",
    "model_profile",
)


async def _release(c: Console, v: Viewer, release_id: str) -> tuple[dict[str, Any] | None, str]:
    if not release_id:
        return None, ""
    try:
        return await c.prepare.release(v.key, release_id), ""
    except PrepareError as exc:
        return None, f"{exc.code}: {exc.message}"


def _evaluate(form: dict[str, str], release: dict[str, Any] | None) -> dict[str, Any]:
    """Everything the page shows for one draft; pure apart from the release it is given."""
    overrides = preview.overrides_from_form(form)
    errors = preview.field_errors(overrides)
    out: dict[str, Any] = {
        "overrides": overrides,
        "errors": errors,
        "effective": preview.effective(overrides),
        "thresholds": [],
        "profile_error": "",
    }
    if not errors and release is not None:
        try:
            out["thresholds"] = preview.thresholds(
                validate_policy(overrides), release["model_profile"]
            )
        except InvalidPolicy as exc:
            out["profile_error"] = exc.message
    return out


async def _dry_run(
    c: Console, v: Viewer, session_id: str, overrides: dict[str, Any], input_budget: int
) -> dict[str, Any]:
    await require_session(c, v, session_id)
    view = await console_reads.latest_main_view(c.pool, session_id)
    if view is None:
        return {"error": f"session {session_id} has no run yet"}
    chain = await console_reads.summary_chain(c.pool, session_id, view.get("current_summary_id"))
    covered = frozenset(i for s in chain for i in s["covered_record_ids"])
    return preview.dry_run(
        view["records"],
        covered,
        validate_policy(overrides),
        {k: int(view.get(k) or 0) for k in preview.COUNTERS},
        int(view.get("estimated_input") or 0),
        input_budget,
    )


def _form(request: Request) -> dict[str, str]:
    return {k: str(val) for k, val in request.query_params.items()}


@router.get(PATH)
async def settings_page(request: Request, v: Viewer = Depends(viewer)) -> Response:  # noqa: B008
    c = console_of(request)
    form = _form(request)
    release, release_error = await _release(c, v, form.get("release", ""))
    state = _evaluate(form, release)
    dry: dict[str, Any] | None = None
    sid = form.get("dry_run_session", "").strip()
    if sid and release is not None and not state["errors"] and state["thresholds"]:
        try:
            budget = int(state["thresholds"][0]["input_budget"])
            dry = await _dry_run(c, v, sid, state["overrides"], budget)
        except Refused as exc:
            dry = {"error": f"{exc.code}: {exc.message}"}
    return page(
        request,
        "settings.html",
        viewer=v,
        fields=preview.FIELDS,
        form=form,
        release=release,
        release_error=release_error,
        dry=dry,
        published=None,
        publish_error="",
        **state,
    )


@router.post(f"{PATH}/validate")
async def validate(request: Request, v: Viewer = Depends(viewer)) -> Response:  # noqa: B008
    """Live validation: the draft's errors by field path and the preview, as HTML."""
    body = await request.json()
    form = {str(k): str(val) for k, val in dict(body).items()}
    c = console_of(request)
    release, release_error = await _release(c, v, form.get("release", ""))
    state = _evaluate(form, release)
    html = page(request, "_preview.html", release=release, release_error=release_error, **state)
    return JSONResponse({"errors": state["errors"], "preview_html": bytes(html.body).decode()})


@router.post(f"{PATH}/publish")
async def publish(request: Request, v: Viewer = Depends(viewer)) -> Response:  # noqa: B008
    """A new release: the base release's content with the draft's overrides, published
    through Prepare's release API with the user's own key (which decides if it may)."""
    c = console_of(request)
    form = {k: str(val) for k, val in (await request.form()).items()}
    release, release_error = await _release(c, v, form.get("release", ""))
    state = _evaluate(form, release)
    published, publish_error = None, release_error
    if release is not None and not state["errors"]:
        body = {k: release[k] for k in RELEASE_FIELDS if release.get(k) is not None}
        try:
            published = await c.prepare.publish(
                v.key, body | {"context_policy": state["overrides"]}
            )
        except PrepareError as exc:
            publish_error = f"{exc.code}: {exc.message}"
    elif state["errors"]:
        publish_error = "the draft has errors: nothing was published"
    return page(
        request,
        "settings.html",
        viewer=v,
        fields=preview.FIELDS,
        form=form,
        release=release,
        release_error=release_error,
        dry=None,
        published=published,
        publish_error=publish_error,
        **state,
    )
