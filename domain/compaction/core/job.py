"""A compaction job's inputs, as the service reads them, and the job as the core carries
it from step to step (R11, R15.3). Frozen: a step returns a new job, never changes one."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from domain.compaction.drafts import SourceItem
from domain.context.rendering import RecordView
from domain.frontier import Frontier
from domain.policy.context_policy import ContextPolicy
from schemas.wire import CompactionRequest

CountFn = Callable[[str], int]


@dataclass(frozen=True)
class ParentSummary:
    """The committed summary a job extends (R11.8): its content is carried forward and
    what it covers is never summarized again."""

    summary: Mapping[str, Any]  # the draft, as ``SummaryDraft.to_dict`` wrote it
    summary_text: str
    summary_tokens: int
    covered_record_ids: frozenset[str]
    covered_ranges: tuple[tuple[int, int], ...]


class AgentFork(Protocol):
    """The agent's last rendered request of the job's thread, which a summarizer of the
    agent's own model continues (``domain.summarizer.fork.AgentRequest``)."""

    @property
    def body(self) -> Mapping[str, Any]: ...

    def shows(
        self, segment: Sequence[SourceItem], summary_id: str | None, summarized: frozenset[str]
    ) -> bool: ...


@dataclass(frozen=True)
class JobLimits:
    """The service's limits on a job's summarizer calls (its settings)."""

    segment_tokens: int  # the records one call reads, at most (R11.2)
    output_tokens: int | None = None  # a call's cap; None: its share of the bound
    # Over its bound, re-summarize from the records what the job covers while they are
    # at most this many tokens; 0: always roll the parent's entries up (R11.8).
    rederive_tokens: int = 0
    # The summarizer is a billed model (not the built-in one): ``compaction.rollup``
    # ``auto`` fits a summary over its bound instead of a roll-up call.
    billed: bool = False


@dataclass(frozen=True)
class JobInputs:
    """Everything a job is planned on, read by the service before the first step."""

    req: CompactionRequest
    parent: ParentSummary | None
    view: Sequence[RecordView]  # the job's view; what ``parent`` covers is left out
    policy: ContextPolicy  # the session's release (R1.4)
    frontier: Frontier  # the thread's plan and constraints: never restated (R11.4, R11.5)
    limits: JobLimits
    count: CountFn  # the token counter
    summary_id: str  # the id the new revision takes if the job succeeds
    agent: AgentFork | None = None  # None: every call is the summarizer's own request


@dataclass(frozen=True)
class Job:
    """One job between its steps: its inputs, the bound its summary keeps (R11.2), and
    the summarizer calls it made so far (each counted when it is made, failed or not)."""

    inputs: JobInputs
    records: tuple[RecordView, ...]  # the view minus what the parent summary covers
    bound: int  # R11.2/R11.8: the effective summary's token bound
    output_tokens: int  # per summarizer call, at most; the segments share the bound
    by_id: Mapping[str, RecordView] = field(default_factory=dict)
    calls: int = 0

    @property
    def req(self) -> CompactionRequest:
        return self.inputs.req

    @property
    def op_id(self) -> str:
        return f"{self.req.job_id}:model"

    @property
    def covered_before(self) -> frozenset[str]:
        parent = self.inputs.parent
        return parent.covered_record_ids if parent else frozenset()

    def called(self, calls: int) -> Job:
        return replace(self, calls=self.calls + calls)
