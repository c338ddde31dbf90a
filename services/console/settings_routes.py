"""Settings → Context compaction (R17, R7.7): the overrides form, live validation beside
each field (a small JSON endpoint), the effective policy with provenance, InputBudget and
thresholds per purpose, a dry run for a session, and publish through Prepare."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from services.console import policy_form
from services.console.context import (
    Console,
    Refused,
    Viewer,
    console_of,
    page,
    require_session,
    viewer,
)
from services.console.dry_run import DryRun, dry_run
from services.console.policy_form import Draft
from services.console.prepare_client import PrepareError
from storage import inspection

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


def _evaluate(form: dict[str, str], release: dict[str, Any] | None) -> Draft:
    return policy_form.evaluate(form, None if release is None else release["model_profile"])


def _input_budget(draft: Draft) -> int | None:
    """The action purpose's InputBudget: what the next prepare is checked against."""
    for row in draft.budgets:
        if row["purpose"] == "action" and row["input_budget"] is not None:
            return int(row["input_budget"])
    return None


async def _dry_run(c: Console, v: Viewer, session_id: str, draft: Draft) -> DryRun | str:
    """The dry run of ``session_id`` under the draft, or why there is none."""
    budget = _input_budget(draft)
    if draft.policy is None or budget is None:
        return "the draft needs a base release with a usable model profile and no errors"
    try:
        await require_session(c, v, session_id)
    except Refused as exc:
        return f"{exc.code}: {exc.message}"
    view = await inspection.latest_main_view(c.pool, session_id)
    if view is None:
        return f"session {session_id} has no run yet"
    chain = await inspection.summary_chain(c.pool, session_id, view.current_summary_id)
    covered = frozenset(i for s in chain for i in s.covered_record_ids)
    return dry_run(view.records, covered, draft.policy, view.counters, view.estimated_input, budget)


def _state(draft: Draft) -> dict[str, Any]:
    """The draft as the templates name its parts."""
    return {
        "overrides": draft.overrides,
        "errors": draft.errors,
        "effective": draft.effective,
        "budgets": draft.budgets,
        "profile_error": draft.profile_error,
        "defaults_version": draft.defaults_version,
    }


def _form(request: Request) -> dict[str, str]:
    return {k: str(val) for k, val in request.query_params.items()}


@router.get(PATH)
async def settings_page(request: Request, v: Viewer = Depends(viewer)) -> Response:  # noqa: B008
    c = console_of(request)
    form = _form(request)
    release, release_error = await _release(c, v, form.get("release", ""))
    draft = _evaluate(form, release)
    dry: DryRun | None = None
    dry_error = ""
    sid = form.get("dry_run_session", "").strip()
    if sid:
        got = await _dry_run(c, v, sid, draft)
        dry, dry_error = (None, got) if isinstance(got, str) else (got, "")
    return page(
        request,
        "settings.html",
        viewer=v,
        sections=policy_form.sections(),
        form=form,
        release=release,
        release_error=release_error,
        dry=dry,
        dry_error=dry_error,
        published=None,
        publish_error="",
        **_state(draft),
    )


@router.post(f"{PATH}/validate")
async def validate(request: Request, v: Viewer = Depends(viewer)) -> Response:  # noqa: B008
    """Live validation: the draft's errors by field path and the preview, as HTML."""
    body = await request.json()
    form = {str(k): str(val) for k, val in dict(body).items()}
    c = console_of(request)
    release, release_error = await _release(c, v, form.get("release", ""))
    draft = _evaluate(form, release)
    html = page(
        request, "_preview.html", release=release, release_error=release_error, **_state(draft)
    )
    return JSONResponse({"errors": draft.errors, "preview_html": bytes(html.body).decode()})


@router.post(f"{PATH}/publish")
async def publish(request: Request, v: Viewer = Depends(viewer)) -> Response:  # noqa: B008
    """A new release: the base release's content with the draft's overrides, published
    through Prepare's release API with the user's own key (which decides if it may, and
    checks the hook ids the draft binds)."""
    c = console_of(request)
    form = {k: str(val) for k, val in (await request.form()).items()}
    release, release_error = await _release(c, v, form.get("release", ""))
    draft = _evaluate(form, release)
    published, publish_error = None, release_error
    if release is not None and not draft.issues:
        body = {k: release[k] for k in RELEASE_FIELDS if release.get(k) is not None}
        try:
            published = await c.prepare.publish(v.key, body | {"context_policy": draft.overrides})
        except PrepareError as exc:
            publish_error = f"{exc.code}: {exc.message}"
    elif draft.issues:
        publish_error = "the draft has errors: nothing was published"
    return page(
        request,
        "settings.html",
        viewer=v,
        sections=policy_form.sections(),
        form=form,
        release=release,
        release_error=release_error,
        dry=None,
        dry_error="",
        published=published,
        publish_error=publish_error,
        **_state(draft),
    )
