"""Calibration per space and model (R6.4, issues 13 and 25): the EWMA of provider-reported
over estimated input tokens, one row per (space, model profile) in PostgreSQL so that
every Prepare instance reads the same factor, and one space's reports never move another's
(a profile name is free text: two spaces may use the same). A report folds in under the
row's lock (``fold``, called inside the transaction that claims the report,
storage/calls/model_calls.py), so concurrent reports on several instances are all counted, one
after the other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import asyncpg

from domain.window.budget import Calibration
from schemas.answers.prepared import Drift

# previous calibration -> (next calibration, the drift to store with the call)
Step = Callable[[Calibration], tuple[Calibration, Drift]]


class Calibrations(Protocol):
    """Port: each space's calibration of each model."""

    async def get(self, space_id: str, model: str) -> Calibration | None:
        """The space's calibration of the model, or None before its first report."""

    async def seed(self, space_id: str, model: str, cal: Calibration) -> None:
        """Set a calibration unless there is one (a first start over old calls)."""


def _cal(row: Any) -> Calibration:
    return Calibration(float(row["factor"]), int(row["samples"]), float(row["last_drift"]))


async def fold(
    conn: asyncpg.Connection, space_id: str, model: str, step: Step
) -> tuple[Calibration, Drift]:
    """Apply ``step`` to the space's calibration of the model under its row lock; inside
    a transaction."""
    # The upsert takes the row lock (a first report creates the row): a concurrent fold
    # waits here and then reads this one's result.
    row = await conn.fetchrow(
        "INSERT INTO model_calibration (space_id, model) VALUES ($1, $2)"
        " ON CONFLICT (space_id, model) DO UPDATE SET model = EXCLUDED.model"
        " RETURNING factor, samples, last_drift",
        space_id,
        model,
    )
    cal, drift = step(_cal(row))
    await conn.execute(
        "UPDATE model_calibration SET factor=$3, samples=$4, last_drift=$5, updated_at=now()"
        " WHERE space_id=$1 AND model=$2",
        space_id,
        model,
        cal.factor,
        cal.samples,
        cal.last_drift,
    )
    return cal, drift


class PgCalibrations:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def get(self, space_id: str, model: str) -> Calibration | None:
        row = await self.pool.fetchrow(
            "SELECT factor, samples, last_drift FROM model_calibration"
            " WHERE space_id=$1 AND model=$2 AND samples > 0",
            space_id,
            model,
        )
        return None if row is None else _cal(row)

    async def seed(self, space_id: str, model: str, cal: Calibration) -> None:
        await self.pool.execute(
            "INSERT INTO model_calibration (space_id, model, factor, samples, last_drift)"
            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (space_id, model) DO NOTHING",
            space_id,
            model,
            cal.factor,
            cal.samples,
            cal.last_drift,
        )
