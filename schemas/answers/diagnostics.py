"""The diagnostics answer of one model call (R18): its blocks with their decisions and
read-back references, the summary chain, the budget bar and the call's cost
(``domain.context.call_view``). The budget bar, the summary chain and the cost are the
records the domain's call view is made of (frozen dataclasses, ``schemas.answers.records``),
declared here once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from schemas.answers.records import record_config


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


# What no call has: its cost's label before a result, its cache share without input.
NO_RESULT = "no result yet"
NO_SHARE = "—"


@dataclass(frozen=True)
class BarSegment:
    __pydantic_config__ = record_config("forbid")

    item: str
    tokens: int
    percent: float


@dataclass(frozen=True)
class BudgetBar:
    """The budget items as shares of the input budget, and what is left free."""

    __pydantic_config__ = record_config("forbid")

    input_budget: int
    estimated_input: int
    segments: tuple[BarSegment, ...]
    free: int
    free_percent: float


@dataclass(frozen=True)
class SummaryLink:
    """One summary of the chain (newest first) and what it covers (R11.7)."""

    __pydantic_config__ = record_config("allow")

    summary_id: str
    parent_summary_id: str | None
    covered_ranges: tuple[tuple[int, int], ...]
    covered_record_ids: tuple[str, ...]
    summary_tokens: int
    covered_tokens: int
    trigger_reasons: tuple[str, ...]
    status: str


@dataclass(frozen=True)
class CallCost:
    """The call's reported tokens by kind, its cache share and exact cost; ``cost_label``
    says why there is no cost when there is none."""

    # The input kinds are disjoint; ``priced``: the call's model profile had prices when
    # it was prepared; ``cost`` is a decimal amount of ``currency``; ``cost_label`` says
    # why there is none (``NO_RESULT``, or ``domain.context.call_view``'s ``NO_USAGE``,
    # ``NOT_PRICED``).
    __pydantic_config__ = record_config("allow")

    reported: bool
    priced: bool = False
    fresh_input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache_share_percent: float | None = None
    cache_share_label: str = NO_SHARE
    cost: str | None = None
    cost_picos: int | None = None
    currency: str | None = None
    cost_label: str = NO_RESULT

    @property
    def input_tokens(self) -> int:
        return self.fresh_input_tokens + self.cached_input_tokens + self.cache_write_tokens


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
