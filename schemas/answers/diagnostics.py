"""The diagnostics answer of one model call (R18): its blocks with their decisions and
read-back references, the summary chain, the budget bar and the call's cost
(``domain.context.call_view``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class ReadBack(BaseModel):
    """How to read a source record back: the ``read_content`` ref and the paged route."""

    model_config = ConfigDict(extra="forbid")

    ref: str
    path: str


class DiagnosticBlock(BaseModel):
    """One block of the call's context: its role as sent (None: not sent, a record a
    summary stands for), category, retention, tokens and what was done to it, and why."""

    model_config = ConfigDict(extra="allow")

    block_id: str
    role: str | None
    category: str
    retention: str
    tokens: int | None
    decision: str
    reason: str
    record_id: str | None = None
    kind: str | None = None
    sequence: int | None = None
    record_ids: list[str] = []
    summary_id: str | None = None
    retracted_since: bool = False
    revoked_since: bool = False
    read_back: ReadBack | None = None


class BarSegment(BaseModel):
    model_config = ConfigDict(extra="forbid")

    item: str
    tokens: int
    percent: float


class BudgetBar(BaseModel):
    """The budget items as shares of the input budget, and what is left free."""

    model_config = ConfigDict(extra="forbid")

    input_budget: int
    estimated_input: int
    segments: list[BarSegment]
    free: int
    free_percent: float


class SummaryLink(BaseModel):
    """One summary of the chain (newest first) and what it covers (R11.7)."""

    model_config = ConfigDict(extra="allow")

    summary_id: str
    parent_summary_id: str | None
    covered_ranges: list[tuple[int, int]]
    covered_record_ids: list[str]
    summary_tokens: int
    covered_tokens: int
    trigger_reasons: list[str]
    status: str


class CallCost(BaseModel):
    """The call's reported tokens by kind, its cache share and exact cost; ``cost_label``
    says why there is no cost when there is none."""

    model_config = ConfigDict(extra="allow")

    reported: bool
    priced: bool
    fresh_input_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cache_share_percent: float | None
    cache_share_label: str
    cost: str | None
    cost_picos: int | None
    currency: str | None
    cost_label: str


class Diagnostics(BaseModel):
    """What one model call's context kept, summarized and externalized, and why; the
    blocks' ids by decision and their counts; ``rebuilt``: the blocks were rebuilt for a
    call recorded before views were stored."""

    model_config = ConfigDict(extra="allow")

    session_id: str
    call_id: str
    run_id: str
    instance_id: str
    purpose: str
    model: str
    status: str
    counting_method: str | None
    policy_revision: str | None
    release_id: str | None
    hook_versions: list[str]
    blocks: list[DiagnosticBlock]
    bar: BudgetBar
    chain: list[SummaryLink]
    frontier: dict[str, Any] | None = None
    rebuilt: bool = True
    request_sha256: str | None = None
    summary_id: str | None = None
    summary_version: int | None = None
    cost: CallCost
    decisions: dict[str, int]
    by_decision: dict[str, list[str]]
