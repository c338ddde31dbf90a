"""The compaction side of a prepare (R2.7, R9): the view's compaction state, the budget
observation sent to the processor (the state owner decides and records the report), and
the bounded wait for a job when a call may not be sent without one (R9.7)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from dataclasses import dataclass

from domain.compaction.triggers import (
    CACHE_EXPIRED,
    DEFAULT_CACHE_TTL_MS,
    CompactionState,
    Observation,
    evaluate_triggers,
    ratio_threshold,
)
from domain.context.rendering import ThreadRenderer
from domain.context.selection import OPEN_CALL, build_groups, select_prefix
from domain.policy.context_policy import CompactionPolicy, ContextPolicy
from domain.window.budget import BudgetReport
from domain.window.retention import retained_record_ids
from schemas.wire import BudgetObservation, ControlEvent
from services.bus import send_control
from services.prepare.assembly.views import SummaryView, ThreadViews
from services.prepare.assembly.waiter import Waiter
from storage.compaction.view import CompactionReads, JobStatus
from storage.compaction.view_state import MainRow, ViewState
from storage.releases import Release
from streams.kafka.publish import Publisher


@dataclass(frozen=True)
class Observed:
    """What a prepare's observation says about a job: it may be due, under ``key``, and
    whether it was fired by an expired prompt cache (then the prepare waits for it)."""

    due: bool
    key: str
    cache_expired: bool = False


@dataclass(frozen=True)
class Lineage:
    """A view's compaction state and the summary it shows."""

    state: ViewState
    summary: SummaryView | None


@dataclass
class CompactionCheck:
    reads: CompactionReads
    views: ThreadViews
    publisher: Publisher
    topic: str  # the records topic: observations go to the session's partition
    waiter: Waiter
    wait_s: float = 20.0

    async def lineage(
        self, sid: str, run_id: str, instance_id: str, is_child: bool, row: MainRow | None = None
    ) -> Lineage:
        """Child threads (R13) have their own view and no share in the run's compaction
        lineage: no session summary, no trigger checks on the parent's counters. ``row``:
        the main view's row, read with the thread's new records (``ThreadViews.ahead``)."""
        through = (await self.views.snapshot(sid, run_id)).through_session_sequence
        child = instance_id if is_child else None
        state = await self.reads.state(sid, run_id, through, child, None if is_child else row)
        summary = None
        if state.summary_id is not None:
            summary = await self.reads.summary(state.summary_id)
        return Lineage(state, summary)

    async def observe(
        self,
        scope: tuple[str, str, str],
        rel: Release,
        rend: ThreadRenderer,
        report: BudgetReport,
        lineage: Lineage,
        cache_ttl_ms: int = DEFAULT_CACHE_TTL_MS,
    ) -> Observed:
        """R9.1: the triggers as this prepare sees them, sent to the processor: whether a
        job may be due (fired, or one in flight), whether the model's prompt cache expired
        while the session was idle (``cache_expired``: ``cache_ttl_ms``, the profile's
        lifetime), and the observation's key."""
        sid, run_id, instance_id = scope
        state, summary = lineage.state, lineage.summary
        summary_id = summary.summary_id if summary else None
        fingerprint = _fingerprint(rend.last_sequence, summary_id, rel.policy_revision, report)
        idle = await self._idle(sid, rel.policy.compaction, report)
        probe = Observation(
            report.estimated_input,
            report.input_budget,
            report.required,
            1,
            fingerprint,
            idle_ms=idle,
            cache_ttl_ms=cache_ttl_ms,
        )
        trigger_state = CompactionState(totals=state.counters, baseline=state.baseline)
        conditions = evaluate_triggers(trigger_state, rel.policy.compaction, probe).fired
        fired = bool(conditions)
        compressible, held_by, step = (
            _compressible(rend, rel.policy, run_id) if fired else (0, None, 0)
        )
        fixed = sum(report.items.get(k, 0) for k in ("instructions", "skills", "tool_schemas"))
        key = f"obs:{uuid.uuid4().hex}"
        observation = BudgetObservation(
            report.estimated_input,
            report.input_budget,
            report.required,
            fixed,
            compressible,
            rend.last_sequence,
            summary_id,
            fingerprint,
            rel.policy_revision,
            held_by,
            step,
            idle,
            None if idle is None else cache_ttl_ms,
        )
        event = ControlEvent(key, sid, run_id, instance_id, int(time.time() * 1000), observation)
        await send_control(self.publisher, self.topic, event)
        return Observed(fired or bool(state.active_job_id), key, CACHE_EXPIRED in conditions)

    async def _idle(self, sid: str, policy: CompactionPolicy, report: BudgetReport) -> int | None:
        """The time since the session's last model call, read only where it can matter:
        with the ratio trigger on and the view at or above the target."""
        if policy.context_ratio is None:
            return None
        target = ratio_threshold(policy.target_context_ratio, report.input_budget)
        return await self.reads.idle_ms(sid) if report.estimated_input >= target else None

    async def wait_for_job(self, sid: str, obs_key: str) -> JobStatus:
        """Until the processor checked our observation and the job it started (or the one
        in flight) finished: committed, failed or rejected."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while loop.time() < deadline:
            outcome = await self.reads.observation_outcome(sid, obs_key)
            if outcome is not None:
                return outcome
            await self.waiter.changed(0.1)
        return JobStatus(status="timeout", reason=f"no commit within {self.wait_s}s")


def _fingerprint(last_sequence: int, summary_id: str | None, revision: str, r: BudgetReport) -> str:
    """R9.4: the observed state — source, effective view, policy and budget."""
    state = [last_sequence, summary_id, revision, r.input_budget, r.required]
    return hashlib.sha256(json.dumps(state).encode()).hexdigest()[:32]


def _compressible(
    rend: ThreadRenderer, policy: ContextPolicy, run_id: str
) -> tuple[int, str | None, int]:
    """What a compaction could remove (selection is O(history): only when it fired) —
    never what the release's retention rules keep verbatim (R10.1, as the worker pins) —
    and, when nothing, the call in flight that holds it back if one does; with the
    view's largest group (the most one step grew it)."""
    records = rend.records
    keep = retained_record_ids(records, run_id, policy.retention_rules)
    groups = build_groups(records)
    sel = select_prefix(groups, policy.recent_complete_groups, pinned=keep)
    held = sel.deferral_reason if (sel.deferral_reason or "").startswith(OPEN_CALL) else None
    return sel.compressible_tokens, held, max((g.tokens for g in groups), default=0)
