"""Calibration per model (R6.4, issue 13): the EWMA of provider-reported over estimated
input tokens, one row per model in PostgreSQL so that every Prepare instance reads the
same factor. A report folds in under the row's lock (``fold``, called inside the
transaction that claims the report, storage/model_calls.py), so concurrent reports on
several instances are all counted, one after the other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import asyncpg

from domain.budget import Calibration

# previous calibration -> (next calibration, the drift to store with the call)
Step = Callable[[Calibration], tuple[Calibration, dict[str, Any]]]


class Calibrations(Protocol):
    """Port: each model's calibration."""

    async def get(self, model: str) -> Calibration | None:
        """The model's calibration, or None before its first report."""

    async def seed(self, model: str, cal: Calibration) -> None:
        """Set a model's calibration unless it has one (a first start over old calls)."""


def _cal(row: Any) -> Calibration:
    return Calibration(float(row["factor"]), int(row["samples"]), float(row["last_drift"]))


async def fold(conn: asyncpg.Connection, model: str, step: Step) -> tuple[Calibration, Any]:
    """Apply ``step`` to the model's calibration under its row lock; inside a transaction."""
    # The upsert takes the row lock (a first report creates the row): a concurrent fold
    # waits here and then reads this one's result.
    row = await conn.fetchrow(
        "INSERT INTO model_calibration (model) VALUES ($1) ON CONFLICT (model)"
        " DO UPDATE SET model = EXCLUDED.model RETURNING factor, samples, last_drift",
        model,
    )
    cal, drift = step(_cal(row))
    await conn.execute(
        "UPDATE model_calibration SET factor=$2, samples=$3, last_drift=$4, updated_at=now()"
        " WHERE model=$1",
        model,
        cal.factor,
        cal.samples,
        cal.last_drift,
    )
    return cal, drift


class PgCalibrations:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def get(self, model: str) -> Calibration | None:
        row = await self.pool.fetchrow(
            "SELECT factor, samples, last_drift FROM model_calibration"
            " WHERE model=$1 AND samples > 0",
            model,
        )
        return None if row is None else _cal(row)

    async def seed(self, model: str, cal: Calibration) -> None:
        await self.pool.execute(
            "INSERT INTO model_calibration (model, factor, samples, last_drift)"
            " VALUES ($1, $2, $3, $4) ON CONFLICT (model) DO NOTHING",
            model,
            cal.factor,
            cal.samples,
            cal.last_drift,
        )
