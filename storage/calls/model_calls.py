"""Model calls checked by the gateway (R10.5, R15.1) and the usage that calibrates
estimates (R6.4). One row per prepared context: the unique ``prepared_id`` makes a
retried check return the same call. A usage report is claimed once and folds into its
model's calibration in the same transaction (storage/calibration.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypedDict

import asyncpg

from domain.window.budget import Calibration
from schemas.answers.prepared import CallBudget, DependencyVersions, Drift, ProtectedBlock
from storage.calibration import Step, fold
from storage.calls import views as call_views


class UsageRecord(TypedDict, total=False):
    """A reported call's usage as stored and published: the neutral shape
    (``domain.usage``: ``input_tokens`` is all input), its cache share and, for a priced
    call, its exact cost. An empty report stays empty."""

    input_tokens: int
    fresh_input_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    cache_write_1h_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cache_share: float | None
    cost: str
    cost_picos: int
    currency: str


@dataclass(frozen=True)
class StoredCall:
    call_id: str
    prepared_id: str
    session_id: str
    run_id: str
    instance_id: str
    purpose: str
    model: str
    status: str  # ready | completed
    final_input_sha256: str
    budget: CallBudget
    hook_versions: list[str]
    dependency_versions: DependencyVersions
    drift: Drift | None
    provider_format: str = ""  # the request format the call was rendered in
    created_at: datetime | None = None  # when the gateway checked it (the call's start)


@dataclass(frozen=True)
class NewCall:
    call_id: str
    prepared_id: str
    session_id: str
    run_id: str
    instance_id: str
    purpose: str
    model: str
    final_input_sha256: str
    tool_catalog_version: str
    model_config: dict[str, Any]  # the runtime's, as given, with the model and format
    dependency_versions: DependencyVersions
    manifest: list[ProtectedBlock]
    budget: CallBudget
    hook_versions: list[str]


@dataclass(frozen=True)
class Usage:
    """One reported call: its session's space, the raw estimate and the provider's input
    tokens."""

    space_id: str
    model: str
    estimated: int
    reported: int


@dataclass(frozen=True)
class Sample:
    """What one usage report does to its space's calibration of its model: a pure
    ``step``."""

    space_id: str
    model: str
    step: Step


@dataclass(frozen=True)
class Completion:
    """A report's claim: ``claimed`` for the one report that completed the call; the
    drift stored with it (the first claimant's, for every later report); the model's
    calibration after this report (claimed, with a sample)."""

    claimed: bool
    drift: Drift | None
    calibration: Calibration | None = None


class ModelCalls(Protocol):
    """Port: the model call records."""

    async def for_prepared(
        self, prepared_id: str, session_id: str, run_id: str
    ) -> StoredCall | None: ...

    async def get(self, call_id: str, session_id: str) -> StoredCall | None: ...

    async def insert(self, call: NewCall) -> bool:
        """False when a call for the same prepared context exists (nothing written)."""

    async def complete(
        self, call_id: str, response_sha256: str, usage: UsageRecord, sample: Sample | None
    ) -> Completion:
        """Claim a ready call as completed and, in the same transaction, fold ``sample``
        into its model's calibration and store the drift; not claimed when another report
        claimed it (then its stored drift)."""

    async def recent_usage(self, per_model: int) -> list[Usage]:
        """The last ``per_model`` reported calls of each space's model, oldest first."""


_CALL = (
    "SELECT call_id, prepared_id, session_id, run_id, instance_id, purpose, model, status,"
    " final_input_sha256, budget, hook_versions, dependency_versions, drift,"
    " coalesce(model_config->>'provider_format', '') AS provider_format, created_at"
    " FROM model_calls"
)


def _call(row: Any) -> StoredCall | None:
    if row is None:
        return None
    return StoredCall(
        **(
            dict(row)
            | {
                "budget": CallBudget.model_validate(row["budget"]),
                "dependency_versions": DependencyVersions.model_validate(
                    row["dependency_versions"]
                ),
                "drift": _drift(row["drift"]),
            }
        )
    )


def _drift(raw: Any) -> Drift | None:
    return None if raw is None else Drift.model_validate(raw)


class PgModelCalls:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def for_prepared(
        self, prepared_id: str, session_id: str, run_id: str
    ) -> StoredCall | None:
        return _call(
            await self.pool.fetchrow(
                _CALL + " WHERE prepared_id=$1 AND session_id=$2 AND run_id=$3",
                prepared_id,
                session_id,
                run_id,
            )
        )

    async def get(self, call_id: str, session_id: str) -> StoredCall | None:
        return _call(
            await self.pool.fetchrow(
                _CALL + " WHERE call_id=$1 AND session_id=$2", call_id, session_id
            )
        )

    async def insert(self, call: NewCall) -> bool:
        # What the call saw is stored with it, in the same transaction
        # (storage/calls/views.py), so no later change of the session rewrites it.
        async with self.pool.acquire() as conn, conn.transaction():
            inserted = await self._insert(conn, call)
            if inserted:
                await call_views.record(
                    conn, call.call_id, call.prepared_id, call.session_id, call.final_input_sha256
                )
        return inserted

    @staticmethod
    async def _insert(conn: asyncpg.Connection, call: NewCall) -> bool:
        inserted = await conn.fetchval(
            "INSERT INTO model_calls (call_id, prepared_id, session_id, run_id, instance_id,"
            " purpose, status, model, final_input_sha256, tool_catalog_version, model_config,"
            " dependency_versions, manifest, budget, hook_versions)"
            " VALUES ($1,$2,$3,$4,$5,$6,'ready',$7,$8,$9,$10,$11,$12,$13,$14)"
            " ON CONFLICT (prepared_id) DO NOTHING RETURNING call_id",
            call.call_id,
            call.prepared_id,
            call.session_id,
            call.run_id,
            call.instance_id,
            call.purpose,
            call.model,
            call.final_input_sha256,
            call.tool_catalog_version,
            call.model_config,
            call.dependency_versions.model_dump(),
            [b.to_dict() for b in call.manifest],
            call.budget.model_dump(exclude_unset=True),
            call.hook_versions,
        )
        return inserted is not None

    async def complete(
        self, call_id: str, response_sha256: str, usage: UsageRecord, sample: Sample | None
    ) -> Completion:
        async with self.pool.acquire() as conn, conn.transaction():
            # A concurrent report of the same call waits on the row lock here, then finds
            # it completed and reads the drift the first one stored.
            claimed = await conn.fetchval(
                "UPDATE model_calls SET status='completed', response_sha256=$2, usage=$3,"
                " completed_at=now() WHERE call_id=$1 AND status='ready' RETURNING call_id",
                call_id,
                response_sha256,
                usage,
            )
            if claimed is None:
                stored = await conn.fetchval(
                    "SELECT drift FROM model_calls WHERE call_id=$1", call_id
                )
                return Completion(False, _drift(stored))
            if sample is None:
                return Completion(True, None)
            cal, drift = await fold(conn, sample.space_id, sample.model, sample.step)
            await conn.execute(
                "UPDATE model_calls SET drift=$2 WHERE call_id=$1", call_id, drift.model_dump()
            )
            return Completion(True, drift, cal)

    async def recent_usage(self, per_model: int) -> list[Usage]:
        rows = await self.pool.fetch(
            "SELECT space_id, model, (budget->>'final_estimated_input_raw')::bigint AS est,"
            " (usage->>'input_tokens')::bigint AS act FROM (SELECT c.*, s.space_id,"
            " row_number() OVER (PARTITION BY s.space_id, c.model ORDER BY c.completed_at"
            " DESC) AS n FROM model_calls c JOIN sessions s USING (session_id)"
            " WHERE c.usage ? 'input_tokens') x WHERE n <= $1"
            " ORDER BY space_id, model, completed_at",
            per_model,
        )
        return [
            Usage(r["space_id"], r["model"], int(r["est"] or 0), int(r["act"] or 0)) for r in rows
        ]
