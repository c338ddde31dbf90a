"""The settings page's dry run (R17, R7, R10.3): what the next prepare of an existing
session would do under a draft policy — which records stay verbatim, which a compaction
would summarize (and whether a trigger fires now), which large results are shown as views;
records the draft's retention rules keep verbatim (required/active) are never summarized.
Pure: it reads nothing and writes nothing; the page hands it the session's latest view.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from domain.compaction.triggers import CompactionState, Counters, Observation, evaluate_triggers
from domain.context.call_view import externalized
from domain.context.rendering import RecordView
from domain.context.selection import build_groups, select_prefix
from domain.policy.context_policy import ContextPolicy
from domain.window.retention import retained_record_ids


@dataclass(frozen=True)
class DryRunRow:
    record_id: str
    sequence: int
    kind: str
    tokens: int
    action: str  # keep | summarize | summarize when a trigger fires | externalize


@dataclass(frozen=True)
class DryRun:
    start_job: bool
    fired: tuple[str, ...]
    reason: str | None
    values: dict[str, float]
    thresholds: dict[str, float]
    already_summarized: int
    records: tuple[DryRunRow, ...]


def dry_run(
    records: Sequence[RecordView],
    covered: frozenset[str],
    policy: ContextPolicy,
    counters: Mapping[str, int],
    estimated_input: int,
    input_budget: int,
) -> DryRun:
    """``records``: the latest main view; ``covered``: the ids the session's summary
    chain already covers; ``counters``: user_turns, model_steps and their baselines."""
    visible = [r for r in records if r.record_id not in covered]
    # R10.1: what the draft's retention rules keep verbatim, the compaction
    # worker never summarizes — the same rule (domain/window/retention.py), the latest run's view.
    run_id = (visible[-1].run_id or "") if visible else ""
    keep = retained_record_ids(visible, run_id, policy.retention_rules)
    sel = select_prefix(build_groups(visible), policy.recent_complete_groups, pinned=keep)
    state = CompactionState(
        totals=Counters(counters.get("user_turns", 0), counters.get("model_steps", 0)),
        baseline=Counters(
            counters.get("baseline_user_turns", 0), counters.get("baseline_model_steps", 0)
        ),
    )
    obs = Observation(estimated_input, input_budget, 0, sel.compressible_tokens, "dry-run")
    decision = evaluate_triggers(state, policy.compaction, obs)
    summarize = {i for g in sel.covered for i in g.record_ids}
    inline_max = policy.large_result_policy.inline_max_tokens
    rows = []
    for r in visible:
        if r.record_id in summarize:
            action = "summarize" if decision.start_job else "summarize when a trigger fires"
        elif externalized(r, inline_max):
            action = "externalize"
        else:
            action = "keep"
        rows.append(DryRunRow(r.record_id, r.session_sequence, r.kind, r.token_count, action))
    return DryRun(
        start_job=decision.start_job,
        fired=decision.fired,
        reason=decision.reason or sel.deferral_reason,
        values=decision.values,
        thresholds=decision.thresholds,
        already_summarized=len(covered),
        records=tuple(rows),
    )
