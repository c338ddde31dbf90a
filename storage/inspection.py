"""The read model of inspection (R18, R15.1, R15.4): which sessions a principal may see,
their runs and model calls, what one call saw (its record, source records and summary
chain, for ``domain.context.call_view``) and, for the settings page's dry run, the latest main
view of a session. Used by the web console and ``agentloom session inspect`` alike.

Nothing here writes. Access is decided by the caller with ``domain.auth`` over what
``session_scope`` and ``has_grant`` return (and, for every console page, by Prepare
itself); the listing query already filters by space and by ownership or grant, so a
viewer is never shown a session id it may not open.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from domain.auth import Credential, SessionScope
from domain.context.call_view import CallFacts, call_cost
from domain.context.rendering import RecordView
from domain.policy.context_policy import LargeResultSettings, validate_policy
from schemas.answers.diagnostics import CallCost, SummaryLink
from schemas.errors import InvalidPolicy
from storage.api_keys import find_key
from storage.records.frontier import frontier_at
from storage.records.threads import inherited_records, thread_records

MAX_CHAIN = 100  # a summary chain longer than this is cut (a cycle would never end)


@dataclass(frozen=True)
class CallSummary:
    """One model call of a session, as listed."""

    call_id: str
    run_id: str
    instance_id: str
    purpose: str
    model: str
    status: str
    input_budget: int | None
    estimated_input: int | None
    summary_id: str | None
    created_at: datetime
    cost: CallCost  # tokens by kind, cache share and cost of its reported result


@dataclass(frozen=True)
class MainView:
    """The latest run's main-thread view, for a dry run of the next prepare."""

    run_id: str
    records: tuple[RecordView, ...]
    current_summary_id: str | None
    counters: dict[str, int]  # user_turns, model_steps and their baselines
    estimated_input: int  # the processor's estimate: fixed overhead + view tokens


def _json(v: Any) -> Any:
    return json.loads(v) if isinstance(v, str) else v


async def credential(pool: asyncpg.Pool, key_id: str) -> tuple[Credential, str] | None:
    """A live key's credential and digest (the caller verifies the secret)."""
    stored = await find_key(pool, key_id)
    return None if stored is None else (stored.credential, stored.digest)


async def session_scope(pool: asyncpg.Pool, session_id: str) -> SessionScope | None:
    r = await pool.fetchrow(
        "SELECT session_id, space_id, actor_id FROM sessions WHERE session_id=$1", session_id
    )
    return None if r is None else SessionScope(r["session_id"], r["space_id"], r["actor_id"])


async def has_grant(pool: asyncpg.Pool, session_id: str, actor_id: str) -> bool:
    found = await pool.fetchval(
        "SELECT 1 FROM session_grants WHERE session_id=$1 AND actor_id=$2", session_id, actor_id
    )
    return found is not None


@dataclass(frozen=True)
class SessionListing:
    """A session as the inspector lists it: owner, release, active run, counters and how
    many runs it has had."""

    session_id: str
    actor_id: str
    release_id: str
    active_run_id: str | None
    user_turns: int
    model_steps: int
    created_at: datetime
    runs: int


@dataclass(frozen=True)
class RunListing:
    """A run as the inspector lists it, with how many model calls it made."""

    run_id: str
    main_instance_id: str
    status: str
    created_at: datetime
    ended_at: datetime | None
    calls: int


async def visible_sessions(
    pool: asyncpg.Pool, space_id: str, actor_id: str | None, limit: int = 100
) -> list[SessionListing]:
    """Sessions of the space the actor owns or holds a grant on (every one for a host
    acting as the runtime itself), newest first."""
    rows = await pool.fetch(
        "SELECT s.session_id, s.actor_id, s.release_id, s.active_run_id, s.user_turns,"
        " s.model_steps, s.created_at,"
        " (SELECT count(*) FROM runs u WHERE u.session_id = s.session_id) AS runs"
        " FROM sessions s WHERE s.space_id = $1 AND ($2::text IS NULL OR s.actor_id = $2"
        "  OR EXISTS (SELECT 1 FROM session_grants g"
        "   WHERE g.session_id = s.session_id AND g.actor_id = $2))"
        " ORDER BY s.created_at DESC, s.session_id LIMIT $3",
        space_id,
        actor_id,
        limit,
    )
    return [SessionListing(**dict(r)) for r in rows]


async def runs(pool: asyncpg.Pool, session_id: str) -> list[RunListing]:
    rows = await pool.fetch(
        "SELECT u.run_id, u.main_instance_id, u.status, u.created_at, u.ended_at,"
        " (SELECT count(*) FROM model_calls m"
        "   WHERE m.session_id = u.session_id AND m.run_id = u.run_id) AS calls"
        " FROM runs u WHERE u.session_id=$1 ORDER BY u.started_sequence",
        session_id,
    )
    return [RunListing(**dict(r)) for r in rows]


async def calls(pool: asyncpg.Pool, session_id: str) -> list[CallSummary]:
    """The session's model calls in the order they were made."""
    rows = await pool.fetch(
        "SELECT call_id, run_id, instance_id, purpose, model, status, created_at,"
        " (budget->>'input_budget')::bigint AS input_budget,"
        " (budget->>'final_estimated_input')::bigint AS estimated_input,"
        " dependency_versions->>'summary_id' AS summary_id, usage,"
        " coalesce(jsonb_typeof(budget->'prices') = 'object', false) AS priced"
        " FROM model_calls WHERE session_id=$1 ORDER BY created_at, call_id",
        session_id,
    )
    out = []
    for r in rows:
        row = dict(r)
        usage, priced = _json(row.pop("usage")), bool(row.pop("priced"))
        out.append(CallSummary(**row, cost=call_cost(row["status"], usage, priced)))
    return out


async def call_of(pool: asyncpg.Pool, ident: str) -> tuple[str, str] | None:
    """The (session_id, call_id) of a model call named by its own id or by the id of the
    prepared context it was checked for (R18 diagnostics); None if there is none."""
    r = await pool.fetchrow(
        "SELECT session_id, call_id FROM model_calls WHERE call_id=$1"
        " UNION ALL SELECT session_id, call_id FROM model_calls WHERE prepared_id=$1 LIMIT 1",
        ident,
    )
    return None if r is None else (r["session_id"], r["call_id"])


async def call_facts(pool: asyncpg.Pool, session_id: str, call_id: str) -> CallFacts | None:
    """Everything ``domain.context.call_view`` needs for one call, or None if the session has no
    such call."""
    r = await pool.fetchrow(
        "SELECT call_id, run_id, instance_id, purpose, status, model, manifest, budget,"
        " dependency_versions, hook_versions, usage FROM model_calls"
        " WHERE session_id=$1 AND call_id=$2",
        session_id,
        call_id,
    )
    if r is None:
        return None
    deps = dict(_json(r["dependency_versions"]) or {})
    budget = dict(_json(r["budget"]) or {})
    records = await call_records(pool, session_id, r["run_id"], r["instance_id"], deps)
    async with pool.acquire() as conn:
        frontier = await frontier_at(conn, session_id, r["run_id"], r["instance_id"], deps)
    return CallFacts(
        call_id=r["call_id"],
        run_id=r["run_id"],
        instance_id=r["instance_id"],
        purpose=r["purpose"],
        model=r["model"],
        status=r["status"],
        budget=budget,
        manifest=tuple(_json(r["manifest"]) or ()),
        dependency_versions=deps,
        hook_versions=tuple(r["hook_versions"] or ()),
        records=tuple(records),
        chain=await summary_chain(pool, session_id, deps.get("summary_id")),
        inline_max_tokens=await inline_max_tokens(pool, deps.get("release_id")),
        frontier=frontier.to_dict(),
        usage=_json(r["usage"]),
        priced=isinstance(budget.get("prices"), dict),
    )


async def inline_max_tokens(pool: asyncpg.Pool, release_id: str | None) -> int:
    """The release's large-result rule (R10.3); the platform default for a call that
    names no release (recorded before releases were named in its dependencies)."""
    default = LargeResultSettings().inline_max_tokens
    if not release_id:
        return default
    raw = await pool.fetchval("SELECT context_policy FROM releases WHERE release_id=$1", release_id)
    if raw is None:
        return default
    try:
        return validate_policy(_json(raw)).large_result_policy.inline_max_tokens
    except InvalidPolicy:  # a release is validated at publish; never expected here
        return default


async def call_records(
    pool: asyncpg.Pool, session_id: str, run_id: str, instance_id: str, deps: dict[str, Any]
) -> list[RecordView]:
    """The source records a call's view was built from: the inherited history through the
    run's snapshot boundary and the thread's own records through the call's last sequence
    (both recorded in its dependency versions)."""
    through = int(deps.get("through_session_sequence") or 0)
    last = deps.get("thread_last_sequence")
    async with pool.acquire() as conn:
        inherited = await inherited_records(conn, session_id, through)
        own = await thread_records(
            conn, session_id, run_id, instance_id, through, None if last is None else int(last)
        )
    return inherited + own


async def summary_chain(
    pool: asyncpg.Pool | asyncpg.Connection, session_id: str, summary_id: str | None
) -> tuple[SummaryLink, ...]:
    """The summary and its parents, newest first, each with its covered ranges."""
    out: list[SummaryLink] = []
    seen: set[str] = set()
    while summary_id is not None and summary_id not in seen and len(out) < MAX_CHAIN:
        seen.add(summary_id)
        r = await pool.fetchrow(
            "SELECT summary_id, parent_summary_id, covered_ranges, covered_record_ids,"
            " summary_tokens, covered_tokens, trigger_reasons, status FROM summary_revisions"
            " WHERE session_id=$1 AND summary_id=$2",
            session_id,
            summary_id,
        )
        if r is None:
            break
        out.append(
            SummaryLink(
                summary_id=r["summary_id"],
                parent_summary_id=r["parent_summary_id"],
                covered_ranges=tuple((int(a), int(b)) for a, b in _json(r["covered_ranges"])),
                covered_record_ids=tuple(r["covered_record_ids"] or ()),
                summary_tokens=int(r["summary_tokens"]),
                covered_tokens=int(r["covered_tokens"] or 0),
                trigger_reasons=tuple(r["trigger_reasons"] or ()),
                status=str(r["status"]),
            )
        )
        summary_id = r["parent_summary_id"]
    return tuple(out)


async def latest_main_view(pool: asyncpg.Pool, session_id: str) -> MainView | None:
    """For a dry run: the latest run's main-thread view (inherited + own records), the
    main lineage's current summary, counter totals and baselines, and the processor's
    estimate of the next prepare (fixed overhead + view tokens, DESIGN.md)."""
    run = await pool.fetchrow(
        "SELECT u.run_id, u.main_instance_id, x.through_session_sequence"
        " FROM runs u JOIN history_snapshots x USING (snapshot_id)"
        " WHERE u.session_id=$1 ORDER BY u.started_sequence DESC LIMIT 1",
        session_id,
    )
    if run is None:
        return None
    deps = {"through_session_sequence": run["through_session_sequence"]}
    records = await call_records(pool, session_id, run["run_id"], run["main_instance_id"], deps)
    st = await pool.fetchrow(
        "SELECT s.user_turns, s.model_steps, c.current_summary_id,"
        " coalesce(c.baseline_user_turns, 0) AS baseline_user_turns,"
        " coalesce(c.baseline_model_steps, 0) AS baseline_model_steps,"
        " coalesce(c.fixed_overhead + c.view_tokens, 0) AS estimated_input"
        " FROM sessions s LEFT JOIN compaction_state c"
        " ON c.session_id = s.session_id AND c.lineage = 'main' WHERE s.session_id=$1",
        session_id,
    )
    row = dict(st) if st else {}
    names = ("user_turns", "model_steps", "baseline_user_turns", "baseline_model_steps")
    return MainView(
        run_id=run["run_id"],
        records=tuple(records),
        current_summary_id=row.get("current_summary_id"),
        counters={k: int(row.get(k) or 0) for k in names},
        estimated_input=int(row.get("estimated_input") or 0),
    )
