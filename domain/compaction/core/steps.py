"""The steps of a compaction job that wait on I/O, and the answers the service gives them.

``plan_job`` returns a step, ``finish_job`` takes the step with its answer and returns
the next one; a job ends in its ``CompactionOutcome`` (succeeded, failed or deferred).
Each pending step names the one I/O it waits for:

- ``AskBefore``: the release's ``context.compact.before`` hooks (R14) → ``Keep`` or ``Failure``;
- ``Summarize``: the summarizer's calls for the job's segments (R11.3) → ``Drafts``;
- ``ReadCovered``: the records the parent summary covers, read again (R11.8) → the
  records, or None when they are over ``max_tokens``;
- ``RollUp``: the summarizer's calls that roll the entries up into the bound (R11.8) →
  ``Drafts``;
- ``AskAfter``: the release's ``context.compact.after`` hooks (R14) → the patched draft
  or ``Failure``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from domain.compaction.core.job import Job
from domain.compaction.drafts import SummaryDraft, SummaryRequest
from domain.context.rendering import RecordView
from domain.context.selection import Group, Segment
from domain.policy.sections import HookBinding
from schemas.summary_body import RollupNote
from schemas.wire import CompactionOutcome

HOOK_BEFORE, HOOK_AFTER = "context.compact.before", "context.compact.after"


@dataclass(frozen=True)
class Failure:
    """Why an I/O step gave no usable answer: the stage that failed the job and a
    machine-readable code, with its detail (``invalid_summary`` + ``unknown_source_id``)."""

    stage: str  # summarize | validate | hooks
    code: str
    detail: str = ""

    @property
    def reason(self) -> str:
        return f"{self.code}:{self.detail}" if self.detail else self.code


@dataclass(frozen=True)
class Drafts:
    """The summarizer's answers to a step's requests, in order, up to the first that
    failed (``failure``); ``calls``: the calls made, the failed one included."""

    drafts: tuple[SummaryDraft, ...]
    calls: int
    failure: Failure | None = None


@dataclass(frozen=True)
class Keep:
    """What the before hooks answered: records to keep verbatim, a tighter summary."""

    record_ids: frozenset[str] = frozenset()
    max_output_tokens: int | None = None


@dataclass(frozen=True)
class AskBefore:
    job: Job
    groups: tuple[Group, ...]
    pinned: frozenset[str]
    candidates: tuple[str, ...]  # what selection would cover, in order

    @property
    def bindings(self) -> tuple[HookBinding, ...]:
        return self.job.inputs.policy.hook_bindings


@dataclass(frozen=True)
class Summarize:
    job: Job
    segments: tuple[Segment, ...]
    requests: tuple[SummaryRequest, ...]  # one per segment, in order
    covered: tuple[Group, ...]  # the groups the new revision covers (the view's)
    # Set when the segments are the parent's records read again with the covered groups
    # (R11.8): the calls the job had made before.
    rederive_from: int | None = None


@dataclass(frozen=True)
class ReadCovered:
    job: Job
    merged: SummaryDraft
    covered: tuple[Group, ...]
    max_tokens: int

    @property
    def ids(self) -> frozenset[str]:
        return self.job.covered_before


@dataclass(frozen=True)
class RollUp:
    job: Job
    merged: SummaryDraft
    covered: tuple[Group, ...]
    requests: tuple[SummaryRequest, ...]
    entries_in: int


@dataclass(frozen=True)
class AskAfter:
    job: Job
    merged: SummaryDraft
    covered: tuple[Group, ...]
    rollup: RollupNote | None

    @property
    def bindings(self) -> tuple[HookBinding, ...]:
        return self.job.inputs.policy.hook_bindings


Pending = AskBefore | Summarize | ReadCovered | RollUp | AskAfter
Step = Pending | CompactionOutcome
Answer = Keep | Drafts | Failure | SummaryDraft | Sequence[RecordView] | None


def binds(job: Job, point: str) -> bool:
    """The release binds a hook at ``point`` (R14)."""
    return any(b.point == point for b in job.inputs.policy.hook_bindings)
