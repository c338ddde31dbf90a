"""One compaction job's state as the worker carries it between its stages, and how a
stage stops it (R15.3: a stopped job leaves the old view)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from domain.compaction.errors import InvalidSummary
from domain.compaction.text_rules import RuleDecision
from domain.context.rendering import RecordView
from domain.frontier import Frontier
from domain.policy.sections import HookBinding
from schemas.wire import CompactionOutcome, CompactionRequest
from services.compaction.costs import Spent
from storage.compaction.jobs import ParentSummary


class Stop(Exception):
    """A stage ended the job without a summary; the old view stays (R15.3)."""

    def __init__(self, stage: str, reason: str, status: str = "failed") -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage, self.reason, self.status = stage, reason, status


@dataclass
class JobState:
    """One job's inputs and what it has spent so far."""

    req: CompactionRequest
    parent: ParentSummary | None
    records: list[RecordView]  # the view minus what the parent summary covers
    bound: int  # R11.2/R11.8: the effective summary's token bound
    keep_recent: int
    output_tokens: int  # per summarizer call, at most; the segments share the bound
    frontier: Frontier  # the thread's plan and constraints: never restated (R11.4)
    hooks: tuple[HookBinding, ...] = ()  # R14: what the session's release binds
    # R10.1: records the release's retention rules keep verbatim (required/active).
    retained: frozenset[str] = frozenset()
    spent: Spent = field(default_factory=Spent)  # R18: what the summarizer calls used
    calls: int = 0
    text_rules: tuple[RuleDecision, ...] = ()  # what the text rules framed or marked
    op_id: str = field(init=False)

    def __post_init__(self) -> None:
        self.op_id = f"{self.req.job_id}:model"

    @cached_property
    def by_id(self) -> dict[str, RecordView]:
        return {r.record_id: r for r in self.records}

    @property
    def covered_before(self) -> frozenset[str]:
        return self.parent.covered_record_ids if self.parent else frozenset()

    def stopped(self, stop: Stop) -> CompactionOutcome:
        return CompactionOutcome(
            self.req.job_id,
            stop.status,
            stop.stage,
            stop.reason,
            parent_summary_id=self.req.parent_summary_id,
            model_calls=self.calls,
        )


def invalid(stage: str, exc: InvalidSummary) -> Stop:
    return Stop(stage, f"invalid_summary:{exc.details.get('reason')}")
