"""Answers of the operational routes: the health check and the analytics rollups (R18)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class Health(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["ok"]


class RollupRow(BaseModel):
    """One metric of one window and dimensions (``label``: reason, decision, outcome,
    budget item, currency or ''). Cached-input rows carry the group's ``cache_share``,
    cost rows the ``cost`` as a decimal string."""

    model_config = ConfigDict(extra="allow")

    bucket_start: str
    space_id: str
    agent_id: str
    release_id: str
    model: str
    purpose: str
    metric: str
    label: str
    value: int
    cache_share: float | None = None
    cost: str | None = None


class Distribution(BaseModel):
    """Count, exact sum and p50/p95 of a ``*_hist`` metric per window and dimensions."""

    model_config = ConfigDict(extra="allow")

    bucket_start: str
    space_id: str
    agent_id: str
    release_id: str
    model: str
    purpose: str
    metric: str
    label: str
    count: int
    sum: int | None
    p50: int | None
    p95: int | None


class Rollups(BaseModel):
    """The rollup rows of the key's space; ``truncated``: more rows than ``limit``."""

    model_config = ConfigDict(extra="forbid")

    window: Literal["1m", "1h"]
    space_id: str
    rows: list[RollupRow]
    distributions: list[Distribution]
    truncated: bool
