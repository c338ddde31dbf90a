"""Pre-emptive compaction checks, pure (DESIGN.md "pre-emptive checks").

From cached per-record counts and the last observed fixed overhead, the processor starts
compaction before the runtime asks — so that it is usually done by the next prepare. Only
the first crossing since the last success is handled here (the candidate has no
``last_attempt``); retries stay with the prepare-time checks and their growth gate.
A probe that fires becomes an ordinary budget observation (``domain.compaction.control``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from domain.compaction.trigger_kinds.table import TRIGGER_KINDS
from domain.compaction.triggers import CompactionState, Counters, Observation, evaluate_triggers
from domain.context.rendering import RecordView
from domain.context.selection import OPEN_CALL, build_groups, select_prefix
from domain.policy.context_policy import CompactionPolicy, ContextPolicy
from schemas.wire import BudgetObservation, ControlEvent


@dataclass(frozen=True)
class PreemptCandidate:
    """A main lineage with an active run, no job in flight and no attempt remembered."""

    session_id: str
    run_id: str
    policy: ContextPolicy  # the release's, parsed once per revision
    release_policy: str  # the release's policy revision
    fixed_overhead: int
    view_tokens: int
    input_budget: int
    required_tokens: int

    @property
    def estimate(self) -> int:
        return self.fixed_overhead + self.view_tokens


def reads_counters(policy: CompactionPolicy) -> bool:
    """Whether a kind ``policy`` enables reads the counters: without one (the default
    policy: the ratio alone) the probe needs no view state, only the cached estimate."""
    return any(k.reads_counters and k.enabled(policy) for k in TRIGGER_KINDS.values())


def probe_fires(
    c: PreemptCandidate, policy: CompactionPolicy, counters: Counters, baseline: Counters
) -> bool:
    """Would a check on the cached estimate start a job? (Cheap: decides whether the
    view's records are read at all.)"""
    probe = evaluate_triggers(
        CompactionState(counters, baseline),
        policy,
        Observation(c.estimate, c.input_budget, c.fixed_overhead, 1, "probe"),
    )
    return probe.start_job


def preemptive_event(
    c: PreemptCandidate,
    main_instance_id: str,
    records: Sequence[RecordView],
    covered: Collection[str],
    through: int,
    summary_id: str | None,
    keep_recent: int,
    now_ms: int,
) -> ControlEvent:
    """The observation the processor makes on the runtime's behalf: the view's records
    not covered by its summary, grouped, give the compressible tokens (R11.1)."""
    records = [x for x in records if x.record_id not in covered]
    groups = build_groups(records)
    sel = select_prefix(groups, keep_recent)
    held = sel.deferral_reason if (sel.deferral_reason or "").startswith(OPEN_CALL) else None
    last_seq = records[-1].session_sequence if records else through
    fingerprint = hashlib.sha256(
        f"pre:{last_seq}:{summary_id}:{c.release_policy}:{c.input_budget}".encode()
    ).hexdigest()[:32]
    obs = BudgetObservation(
        c.estimate,
        c.input_budget,
        # What Prepare last measured as required: the same number its checks compare
        # against, so a failed pre-emptive job does not look like "required changed".
        c.required_tokens or c.fixed_overhead,
        c.fixed_overhead,
        sel.compressible_tokens,
        last_seq,
        summary_id,
        fingerprint,
        c.release_policy,
        held,
        max((g.tokens for g in groups), default=0),
    )
    sid = c.session_id
    return ControlEvent(f"pre:{sid}:{last_seq}", sid, c.run_id, main_instance_id, now_ms, obs)
