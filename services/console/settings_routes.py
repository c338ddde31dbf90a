"""Settings → Context compaction (R17, R7.7): the overrides form, live validation beside
each field (a small JSON endpoint), the effective policy with provenance, InputBudget and
thresholds per purpose, a dry run for a session, and publish through Prepare."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi.responses import JSONResponse, Response

from domain.preview import form as policy_form
from domain.preview.dry_run import DryRun, dry_run
from domain.preview.form import Draft
from schemas.errors import InvalidRequest
from services.console import fields
from services.console.context import (
    Console,
    Refused,
    Viewer,
    console_of,
    page,
    require_session,
    viewer,
)
from services.console.csrf import checked_viewer
from services.console.fields import RESPONSES, FormId
from services.console.prepare_client import PrepareError
from services.prepare.http.errors import ApiRoute
from storage import inspection

router = APIRouter(route_class=ApiRoute, responses=RESPONSES)
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
# The publish form: every policy field by its path, the base release and the token.
FORM_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/x-www-form-urlencoded": {
                "schema": {"type": "object", "additionalProperties": {"type": "string"}}
            }
        },
    }
}


def _checked(form: dict[str, str], name: str) -> str:
    """The form's id field ``name`` ("" if absent); a value no id can be is a 422."""
    value = form.get(name, "").strip()
    if (problem := fields.id_problem(value)) is not None:
        raise InvalidRequest(f"{name} {problem}", field=name)
    return value


async def _release(c: Console, v: Viewer, release_id: str) -> tuple[dict[str, Any] | None, str]:
    if not release_id:
        return None, ""
    try:
        got = await c.prepare.release(v.key, release_id)
    except PrepareError as exc:
        return None, f"{exc.code}: {exc.message}"
    if not isinstance(got.get("model_profile"), dict):
        return None, f"not_found: {release_id} is not a release"
    return got, ""


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


async def _form(request: Request) -> dict[str, str]:
    """The draft: the query of a GET (a link), the form of a POST (the Preview button),
    never the CSRF token."""
    got = request.query_params if request.method == "GET" else await request.form()
    return {k: str(val) for k, val in got.items() if k != "csrf_token"}


async def _preview(request: Request, v: Viewer) -> Response:
    c = console_of(request)
    form = await _form(request)
    base, release_error = await _release(c, v, _checked(form, "release"))
    draft = _evaluate(form, base)
    dry: DryRun | None = None
    dry_error = ""
    if sid := _checked(form, "dry_run_session"):
        got = await _dry_run(c, v, sid, draft)
        dry, dry_error = (None, got) if isinstance(got, str) else (got, "")
    return page(
        request,
        "settings.html",
        viewer=v,
        sections=policy_form.sections(),
        form=form,
        release=base,
        release_error=release_error,
        dry=dry,
        dry_error=dry_error,
        published=None,
        publish_error="",
        **_state(draft),
    )


@router.get(PATH)
async def settings_page(
    request: Request,
    release: FormId = "",
    dry_run_session: FormId = "",
    v: Viewer = Depends(viewer),  # noqa: B008
) -> Response:
    """The form filled from the query (a link names a base release), the preview and the
    dry run; the policy fields are query values named by their paths."""
    return await _preview(request, v)


@router.post(PATH, openapi_extra=FORM_BODY)
async def preview(request: Request, v: Viewer = Depends(checked_viewer)) -> Response:  # noqa: B008
    """The Preview button: the same page for the posted draft (a POST, so that the CSRF
    token the form carries for Publish never lands in a URL)."""
    return await _preview(request, v)


@router.post(f"{PATH}/validate")
async def validate(
    request: Request,
    form: dict[str, str] = Body(..., max_length=1000),  # noqa: B008
    v: Viewer = Depends(checked_viewer),  # noqa: B008
) -> Response:
    """Live validation of the draft (a JSON object of the form's fields, the CSRF token in
    ``X-CSRF-Token``): its errors by field path and the preview, as HTML."""
    c = console_of(request)
    release, release_error = await _release(c, v, _checked(form, "release"))
    draft = _evaluate(form, release)
    html = page(
        request, "_preview.html", release=release, release_error=release_error, **_state(draft)
    )
    return JSONResponse({"errors": draft.errors, "preview_html": bytes(html.body).decode()})


@router.post(f"{PATH}/publish", openapi_extra=FORM_BODY)
async def publish(request: Request, v: Viewer = Depends(checked_viewer)) -> Response:  # noqa: B008
    """A new release: the base release's content with the draft's overrides, published
    through Prepare's release API with the user's own key (which decides if it may, and
    checks the hook ids the draft binds)."""
    c = console_of(request)
    form = await _form(request)
    release, release_error = await _release(c, v, _checked(form, "release"))
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
