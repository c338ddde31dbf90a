"""``agentloom session inspect ID [--call N]``: a session's model calls and, for one call,
the same view as the web inspector (``domain.context.call_view`` over ``storage.inspection``):
the budget items as a bar against the InputBudget, the blocks in order with role,
category, retention, tokens, decision and reason, the summary chain with each
summary's covered ranges, and the result's tokens by kind, cache share and cost (R18).
The list gives each call's cache share and cost and the session's total per currency, then
the decisions and the questions (open or closed) recorded in the session."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from domain.context.call_view import session_cost
from schemas.errors import ContextError, NotFound
from schemas.settings import Settings
from services.cli.output import JsonOption, fail, out, show
from storage import inspection
from storage.calls import views as call_views
from storage.compaction import diagnostics
from storage.pool import create_pool
from storage.records.authored import session_authored
from storage.roles import dsn_of

app = typer.Typer(no_args_is_help=True, help="What the model calls of a session saw.")
BAR = 50


async def _load(session_id: str, which: str | None) -> dict[str, Any]:
    pool = await create_pool(dsn_of(Settings(), "cli"), 1, 2)
    try:
        if await inspection.session_scope(pool, session_id) is None:
            raise NotFound(f"session {session_id} not found")
        listed = await inspection.calls(pool, session_id)
        data: dict[str, Any] = {
            "session_id": session_id,
            "calls": [asdict(c) for c in listed],
            "totals": [asdict(t) for t in session_cost(c.cost for c in listed)],
            "authored": (await session_authored(pool, session_id)).to_dict(),
            "open_calls": [c.to_dict() for c in await diagnostics.open_calls(pool, session_id)],
            "jobs": [j.to_dict() for j in await diagnostics.recent_jobs(pool, session_id)],
        }
        if which is not None:
            ids = [c.call_id for c in listed]
            number = int(which) if which.isdigit() else 0
            call_id = ids[number - 1] if 0 < number <= len(ids) else which
            view = await call_views.view_of(pool, session_id, call_id)
            if view is None:
                raise NotFound(f"no model call {which} in session {session_id} ({len(ids)} calls)")
            data["call"] = view.to_dict()
        return data
    finally:
        await pool.close()


@app.command()
def inspect(
    session_id: Annotated[str, typer.Argument(help="the session id")],
    call: Annotated[
        str | None, typer.Option("--call", help="a call's number (1 = first) or id")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """The session's model calls; with --call, what that call saw and why."""
    try:
        data = asyncio.run(_load(session_id, call))
    except (ContextError, OSError) as exc:
        fail(exc, as_json)
    show(as_json, data, lambda: _render(data))


def _render(data: dict[str, Any]) -> None:
    t = Table(title=f"session {data['session_id']}: model calls")
    cols = ("#", "call_id", "run_id", "purpose", "model", "status", "estimated", "budget")
    for c in (*cols, "cache", "cost"):
        t.add_column(c)
    for i, c in enumerate(data["calls"], 1):
        t.add_row(
            str(i),
            c["call_id"],
            c["run_id"],
            c["purpose"],
            c["model"],
            c["status"],
            str(c["estimated_input"]),
            str(c["input_budget"]),
            c["cost"]["cache_share_label"],
            c["cost"]["cost_label"],
        )
    out.print(t)
    totals = [f"{x['cost']} {x['currency']} ({x['calls']} priced)" for x in data["totals"]]
    out.print(escape(f"session cost: {'; '.join(totals) or 'none priced'}"))
    _render_authored(data["authored"])
    _render_compaction(data["open_calls"], data["jobs"])
    if "call" in data:
        _render_call(data["call"])


def _render_compaction(calls: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> None:
    """Tool calls without a result, and the latest compaction jobs with their reasons and
    what the text rules framed (never a reason to fail a job)."""
    for c in calls:
        state = "answered unknown for compaction" if c["state"] == "unknown" else "in flight"
        out.print(escape(f"tool call without a result: {c['call_id']} ({c['tool']}) — {state}"))
    for j in jobs:
        why = f" ({j['reason']})" if j["reason"] else ""
        rules = f", {len(j['text_rules'])} entries framed/marked" if j["text_rules"] else ""
        out.print(escape(f"compaction {j['job_id']}: {j['status']} at {j['stage']}{why}{rules}"))


def _render_authored(a: dict[str, Any]) -> None:
    """The decisions and questions recorded in the session (texts are the authors')."""
    out.print(f"decisions recorded: {len(a['decisions'])}")
    for d in a["decisions"]:
        why = f" (reason: {d['reason']})" if d["reason"] else ""
        out.print(escape(f"  - {d['text']}{why} [{d['record_id']}, {d['authority']}]"))
    still = sum(q["status"] == "open" for q in a["questions"])
    out.print(f"questions: {still} open of {len(a['questions'])}")
    for q in a["questions"]:
        end = ""
        if q["closed_by"]:
            end = f" — answered: {q['answer']}" if q["answer"] else " — closed"
            end += f" by {q['closed_by']}"
        out.print(escape(f"  [{q['status']}] {q['text']} ({q['key']}, {q['record_id']}){end}"))
    if a["unmatched_closings"]:
        out.print(f"  closings naming no open question: {', '.join(a['unmatched_closings'])}")


def _render_call(v: dict[str, Any]) -> None:
    bar = v["bar"]
    out.print(
        f"\n[bold]{v['call_id']}[/] {v['purpose']} on {v['model']} ({v['status']}):"
        f" {bar['estimated_input']} of {bar['input_budget']} tokens;"
        f" release {v['release_id']}, policy {v['policy_revision']}"
    )
    total = max(int(bar["input_budget"]), 1)
    for s in [*bar["segments"], {"item": "free", "tokens": bar["free"]}]:
        width = min(BAR, round(BAR * int(s["tokens"]) / total))
        out.print(f"  {s['item']:<14} {'█' * width}{'·' * (BAR - width)} {s['tokens']}")
    t = Table(title="blocks in order")
    cols = ("block_id", "role", "category", "retention", "tokens", "decision", "reason")
    for col in ("#", *cols):
        t.add_column(col)
    for i, b in enumerate(v["blocks"], 1):
        since = [w for w in ("retracted", "revoked") if b.get(f"{w}_since")]
        cells = ["—" if b[k] is None else str(b[k]) for k in cols]
        if since:  # changed after the call: noted, the call's view stays as it was
            cells[0] += f" ({', '.join(since)} since)"
        t.add_row(str(i), *cells)
    out.print(t)
    _render_cost(v["cost"])
    if v.get("rebuilt"):
        out.print("  rebuilt from today's records (no view was stored with this call)")
    else:
        out.print(f"  as sent: request {v.get('request_sha256')}")
    _render_frontier(v.get("frontier") or {})
    _render_chain(v["chain"])
    out.print(f"  hooks: {', '.join(v['hook_versions']) or 'none'}")


def _render_cost(k: dict[str, Any]) -> None:
    """The result's tokens by kind, the cache share of its input and its cost."""
    if k["reported"]:
        kinds = ("fresh_input", "cached_input", "cache_write", "output", "reasoning")
        counts = ", ".join(f"{n.replace('_', ' ')} {k[f'{n}_tokens']}" for n in kinds)
        out.print(f"  tokens: {counts}")
    out.print(escape(f"  cache share: {k['cache_share_label']}; cost: {k['cost_label']}"))


def _render_frontier(f: dict[str, Any]) -> None:
    """The plan and the constraints in force the call saw (kept, required)."""
    plan = f.get("plan") or {}
    if plan.get("version"):
        out.print(f"  plan v{plan['version']} (set by {plan['record_id']}):")
        for n, i in enumerate(plan["items"], 1):  # texts are the user's and the model's
            out.print(escape(f"    {n}. [{i['status']}] {i['text']} ({i['item_id']})"))
    else:
        out.print("  no plan")
    constraints = f.get("constraints") or []
    out.print(f"  constraints in force (v{f.get('constraints_version', 0)}): {len(constraints)}")
    for c in constraints:
        ident = f"{c['constraint_id']} v{c['version']}, set by {c['record_id']}"
        out.print(escape(f"    - {c['text']} ({ident})"))


def _render_chain(chain: list[dict[str, Any]]) -> None:
    if not chain:
        out.print("  no summary was in effect for this call")
        return
    t = Table(title="summary chain (newest first)")
    for col in ("summary", "parent", "covers", "records", "tokens", "triggered by"):
        t.add_column(col)
    for s in chain:
        t.add_row(
            s["summary_id"],
            s["parent_summary_id"] or "—",
            ", ".join(f"{a}-{b}" for a, b in s["covered_ranges"]),
            str(len(s["covered_record_ids"])),
            f"{s['covered_tokens']} → {s['summary_tokens']}",
            ", ".join(s["trigger_reasons"]),
        )
    out.print(t)
