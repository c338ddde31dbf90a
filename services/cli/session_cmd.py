"""``agentloom session inspect ID [--call N]``: a session's model calls, and for one call
what it saw — each message with its role and size, the budget items as a bar against the
InputBudget, the protected blocks and the hooks that ran (storage/inspection.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer
from rich.table import Table

from schemas.errors import ContextError, NotFound
from schemas.settings import Settings
from services.cli.output import JsonOption, fail, out, show
from storage import inspection
from storage.pool import create_pool

app = typer.Typer(no_args_is_help=True, help="What the model calls of a session saw.")
BAR = 50


async def _load(session_id: str, which: str | None) -> dict[str, Any]:
    pool = await create_pool(Settings().pg_dsn, 1, 2)
    try:
        if not await inspection.session_exists(pool, session_id):
            raise NotFound(f"session {session_id} not found")
        listed = await inspection.calls(pool, session_id)
        data: dict[str, Any] = {"session_id": session_id, "calls": [c.__dict__ for c in listed]}
        if which is not None:
            ids = [c.call_id for c in listed]
            call_id = (
                ids[int(which) - 1] if which.isdigit() and 0 < int(which) <= len(ids) else which
            )
            detail = await inspection.call(pool, session_id, call_id)
            if detail is None:
                raise NotFound(f"no model call {which} in session {session_id} ({len(ids)} calls)")
            data["call"] = detail.__dict__ | {"messages": _messages(detail.request)}
        return data
    finally:
        await pool.close()


def _messages(request: Any) -> list[dict[str, Any]]:
    msgs = (
        request.get("messages") or request.get("input") or [] if isinstance(request, dict) else []
    )
    out_ = []
    for i, m in enumerate(msgs):
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        out_.append(
            {"index": i, "role": m.get("role"), "chars": len(text or ""), "head": (text or "")[:80]}
        )
    return out_


@app.command()
def inspect(
    session_id: Annotated[str, typer.Argument(help="the session id")],
    call: Annotated[
        str | None, typer.Option("--call", help="a call's number (1 = first) or id")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """The session's model calls; with --call, what that call saw."""
    try:
        data = asyncio.run(_load(session_id, call))
    except (ContextError, OSError) as exc:
        fail(exc, as_json)
    show(as_json, data, lambda: _render(data))


def _render(data: dict[str, Any]) -> None:
    t = Table(title=f"session {data['session_id']}: model calls")
    for c in ("#", "call_id", "run_id", "purpose", "model", "status", "estimated", "budget"):
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
        )
    out.print(t)
    if "call" in data:
        _render_call(data["call"])


def _render_call(c: dict[str, Any]) -> None:
    budget = c["budget"]
    total = int(budget.get("input_budget") or 0)
    items = {k: int(v) for k, v in (budget.get("items") or {}).items() if int(v)}
    out.print(
        f"\n[bold]{c['call_id']}[/] {c['purpose']} on {c['model']}:"
        f" {budget.get('final_estimated_input')} of {total} tokens"
    )
    for k, v in sorted(items.items(), key=lambda kv: -kv[1]):
        width = round(BAR * v / total) if total else 0
        out.print(f"  {k:<14} {'█' * width}{'·' * (BAR - width)} {v}")
    m = Table(title="messages as sent")
    for col in ("#", "role", "chars", "content"):
        m.add_column(col)
    for msg in c["messages"]:
        m.add_row(str(msg["index"]), str(msg["role"]), str(msg["chars"]), msg["head"])
    out.print(m)
    for p in c["manifest"]:
        out.print(f"  protected {p.get('block_id')} ({p.get('kind')}, {p.get('role')})")
    if c["hook_versions"]:
        out.print(f"  hooks: {', '.join(c['hook_versions'])}")
