"""Read-only: what a model call saw (R15.1, R18), for ``agentloom session inspect``.

A model call record keeps the exact provider request as a blob, the itemized budget
against the InputBudget, the protected block manifest and the dependency versions.
Nothing here writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import asyncpg


@dataclass(frozen=True)
class CallSummary:
    call_id: str
    run_id: str
    purpose: str
    model: str
    status: str
    input_budget: int | None
    estimated_input: int | None


@dataclass(frozen=True)
class CallDetail:
    call_id: str
    purpose: str
    model: str
    budget: dict[str, Any]
    manifest: list[dict[str, Any]]
    dependency_versions: dict[str, Any]
    hook_versions: list[str]
    request: Any  # the provider request exactly as sent (a JSON document)


def _json(v: Any) -> Any:
    return json.loads(v) if isinstance(v, str) else v


async def session_exists(pool: asyncpg.Pool, session_id: str) -> bool:
    found = await pool.fetchval("SELECT 1 FROM sessions WHERE session_id=$1", session_id)
    return found is not None


async def calls(pool: asyncpg.Pool, session_id: str) -> list[CallSummary]:
    """The session's model calls in the order they were made."""
    rows = await pool.fetch(
        "SELECT call_id, run_id, purpose, model, status,"
        " (budget->>'input_budget')::bigint AS input_budget,"
        " (budget->>'final_estimated_input')::bigint AS estimated_input"
        " FROM model_calls WHERE session_id=$1 ORDER BY created_at, call_id",
        session_id,
    )
    return [CallSummary(**dict(r)) for r in rows]


async def call(pool: asyncpg.Pool, session_id: str, call_id: str) -> CallDetail | None:
    r = await pool.fetchrow(
        "SELECT m.call_id, m.purpose, m.model, m.budget, m.manifest, m.dependency_versions,"
        " m.hook_versions, b.content FROM model_calls m"
        " JOIN blobs b ON b.sha256 = m.final_input_sha256"
        " WHERE m.session_id=$1 AND m.call_id=$2",
        session_id,
        call_id,
    )
    if r is None:
        return None
    return CallDetail(
        call_id=r["call_id"],
        purpose=r["purpose"],
        model=r["model"],
        budget=dict(_json(r["budget"]) or {}),
        manifest=list(_json(r["manifest"]) or []),
        dependency_versions=dict(_json(r["dependency_versions"]) or {}),
        hook_versions=list(r["hook_versions"] or []),
        request=json.loads(bytes(r["content"]).decode("utf-8")),
    )
