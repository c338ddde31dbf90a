"""``agentloom policy validate|preview|publish FILE`` (R17).

FILE (JSON, or YAML) is either an agent's policy overrides, or a whole release document
(``agent_id``, ``instructions``, ``model_profile``, ``context_policy`` = the overrides,
...), which ``publish`` sends to the Prepare HTTP API as it is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.table import Table

from domain.policy.context_policy import effective_policy
from domain.preview.draft import policy_issues, preview_dict
from domain.window.budget import ModelProfile
from schemas.errors import ContextError, InvalidPolicy
from schemas.settings import Settings
from services.cli.output import INVALID, JsonOption, dump, err, fail, out, show

app = typer.Typer(no_args_is_help=True, help="Validate, preview and publish a ContextPolicy.")

FileArg = Annotated[Path, typer.Argument(help="overrides or a release document (JSON/YAML)")]
KnownHooks = Annotated[
    list[str] | None,
    typer.Option("--known-hook", help="a hook id (name@version) the deployment provides"),
]


def read_doc(path: Path) -> dict[str, Any]:
    doc = read_any(path)
    if not isinstance(doc, dict):
        raise typer.BadParameter(f"{path} must hold an object")
    return doc


def read_any(path: Path) -> Any:
    """A JSON or YAML file's value; a missing or malformed file is a usage error (exit 2)."""
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror}") from exc
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            doc = yaml.safe_load(text)
        else:
            doc = json.loads(text)
    except Exception as exc:
        raise typer.BadParameter(f"{path} is not valid JSON/YAML: {exc}") from exc
    return doc


def is_release(doc: dict[str, Any]) -> bool:
    return "context_policy" in doc or "agent_id" in doc


def overrides_of(doc: dict[str, Any]) -> dict[str, Any]:
    policy = doc.get("context_policy") if is_release(doc) else doc
    return dict(policy or {})


@app.command()
def validate(file: FileArg, known_hook: KnownHooks = None, as_json: JsonOption = False) -> None:
    """Every issue of the policy, each with its field path and rule (exit 2 if any)."""
    try:
        issues = policy_issues(overrides_of(read_doc(file)), known_hook)
    except typer.BadParameter as exc:
        fail(exc, as_json)

    def render() -> None:
        if not issues:
            out.print(f"[green]valid[/] {file}")
        for i in issues:
            d = i["details"]
            out.print(f"[red]{d.get('path')}[/] {d.get('rule')}: {i['message']}")

    show(as_json, {"ok": not issues, "issues": issues}, render)
    if issues:
        raise typer.Exit(INVALID)


def _profiles(doc: dict[str, Any], files: list[Path]) -> list[ModelProfile]:
    raws: list[Any] = []
    for f in files:
        d = read_any(f)
        if not isinstance(d, dict | list):
            raise typer.BadParameter(f"{f} must hold a model profile or a list of them")
        raws += d if isinstance(d, list) else [d.get("model_profile", d)]
    if not raws and is_release(doc) and doc.get("model_profile"):
        raws = [doc["model_profile"]]
    if not raws:
        raise typer.BadParameter("give --model-profile FILE (or a release with model_profile)")
    return [ModelProfile.from_dict(r) for r in raws]


def _limits(pairs: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in pairs:
        name, _, value = p.partition("=")
        if not value.isdigit():
            raise typer.BadParameter(f"--model-limit {p!r}: expected NAME=TOKENS")
        out[name] = int(value)
    return out


@app.command()
def preview(
    file: FileArg,
    model_profile: Annotated[
        list[Path] | None, typer.Option(help="a model profile file (JSON/YAML); repeatable")
    ] = None,
    model_limit: Annotated[
        list[str] | None, typer.Option(help="NAME=TOKENS resolving model_limit_ref")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """The effective policy (each value marked default/override) and, per purpose and
    model profile, the InputBudget and every trigger threshold in tokens."""
    try:
        doc = read_doc(file)
        policy, provenance = effective_policy(overrides_of(doc))
        data = preview_dict(
            policy, provenance, _profiles(doc, model_profile or []), _limits(model_limit or [])
        )
    except (typer.BadParameter, InvalidPolicy) as exc:
        fail(exc, as_json)
    show(as_json, data, lambda: _render_preview(data))


def _render_preview(data: dict[str, Any]) -> None:
    t = Table(title=f"effective policy (platform defaults v{data['defaults_version']})")
    for col in ("field", "value", "from"):
        t.add_column(col)
    flat = _flat(data["effective_policy"])
    for path, src in data["provenance"].items():
        style = "bold" if src == "override" else "dim"
        t.add_row(path, json.dumps(flat.get(path)), f"[{style}]{src}[/]")
    out.print(t)
    b = Table(title="budgets and thresholds (tokens)")
    cols: tuple[str, ...] = ("purpose", "model_profile", "input_budget", "context_trigger_tokens")
    cols += ("target_tokens", "retry_growth_tokens", "summary_max_tokens", "inline_max_tokens")
    for c in (*cols, "user_turns", "model_steps", "error"):
        b.add_column(c.replace("_tokens", ""))
    for row in data["budgets"]:
        error = (row["error"] or {}).get("message", "")
        b.add_row(
            *(str(row[c]) for c in cols), str(row["user_turns"]), str(row["model_steps"]), error
        )
    out.print(b)
    proj = Table(title="projected steady session (cache share, cost per model call)")
    cols = ("purpose", "model_profile", "cache share", "ideal", "cost per call")
    for c in (*cols, "calls per compaction", "cache_expired at"):
        proj.add_column(c)
    for row in data["budgets"]:
        if row["error"] is None:
            proj.add_row(
                row["purpose"],
                row["model_profile"],
                f"{row['projected_cache_share']:.1%}",
                f"{row['projected_ideal_cache_share']:.1%}",
                f"{row['projected_cost_per_call']:.6f} {row['cost_unit']}",
                str(row["calls_per_compaction"]),
                _idle_compaction(row),
            )
    out.print(proj)


def _idle_compaction(row: dict[str, Any]) -> str:
    """When ``cache_expired`` compacts: idle the cache's lifetime at the target or above."""
    if row["cache_expired_tokens"] is None:
        return "off"
    return f"{row['cache_expired_tokens']} tok, {row['cache_ttl_s']} s idle"


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    res: dict[str, Any] = {}
    for k, v in d.items():
        path = f"{prefix}.{k}" if prefix else k
        res |= _flat(v, path) if isinstance(v, dict) else {path: v}
    return res


@app.command()
def publish(
    file: Annotated[Path, typer.Argument(help="a release document (JSON/YAML)")],
    release_id: Annotated[str, typer.Option(help="the id the release is frozen under")],
    url: Annotated[str | None, typer.Option(help="Prepare's base URL (ALC_PREPARE_URL)")] = None,
    api_key: Annotated[
        str | None, typer.Option(help="a host API key (default: ALC_API_KEY)")
    ] = None,
    known_hook: KnownHooks = None,
    as_json: JsonOption = False,
) -> None:
    """Validate locally, then publish through the Prepare HTTP API (frozen there)."""
    try:
        doc = read_doc(file)
        if not is_release(doc):
            raise typer.BadParameter(f"{file} is not a release document (no agent_id)")
        effective_policy(overrides_of(doc), known_hook)
        result = _post(doc | {"release_id": release_id}, url, api_key)
    except (typer.BadParameter, ContextError, httpx.HTTPError) as exc:
        fail(exc, as_json)
    show(as_json, result, lambda: out.print(f"[green]published[/] {json.dumps(result)}"))


class PublishRefused(ContextError):
    code = "publish_refused"


def _post(body: dict[str, Any], url: str | None, api_key: str | None) -> dict[str, Any]:
    s = Settings()
    base = url or os.environ.get("ALC_PREPARE_URL") or f"http://{s.prepare_host}:{s.prepare_port}"
    key = api_key or os.environ.get("ALC_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = httpx.post(f"{base}/v1/releases", json=body, headers=headers, timeout=30.0)
    try:
        data: dict[str, Any] = r.json()
    except ValueError:
        data = {"code": "http_error", "message": r.text[:500]}
    if r.is_success:
        return data
    problem = data.get("error", data) if isinstance(data, dict) else {}
    cls = InvalidPolicy if r.status_code in (400, 422) else PublishRefused
    raise cls(
        f"HTTP {r.status_code}: {problem.get('message', r.text[:200])}",
        status=r.status_code,
        server=problem,
    )


__all__ = ["app", "dump", "err"]
