"""``PgControlStore``: the processor's control reads and their one writer over the
batch's connection — the facts a budget observation or a compaction outcome is decided on
(``domain.compaction.control``, ``domain.compaction.outcome``), and ``apply_control``
that writes the decided effects.

Called inside the processor's batch transaction: the reads lock the lineage's
``compaction_state`` row (the processor is its only writer), so the facts still hold
when the effects are written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import asyncpg

from domain.commit import to_verify
from domain.compaction.control.effects import (
    ControlEffects,
    JobRow,
    LockedState,
    ObservationInputs,
)
from domain.compaction.control.observation import request_of
from domain.compaction.outcome import OutcomeInputs
from domain.compaction.triggers import Counters, LastAttempt
from domain.frontier import Frontier
from domain.policy.context_policy import ContextPolicy
from domain.policy.parsed import policy_of
from domain.pricing import ModelPrices
from domain.window.budget import ModelProfile
from domain.window.model_catalog import purpose_prices
from schemas.wire import BudgetObservation, CompactionOutcome, CompactionRequest, ControlEvent
from storage.compaction import state as compaction_state
from storage.compaction import summaries as repo
from storage.compaction.state import Checked
from storage.compaction.view_cache import CachedViews, session_counters, stamp_of
from storage.compaction.view_state import counted_after
from storage.records.frontier import read_frontier, thread_frontier


async def job_row(conn: asyncpg.Connection, job_id: str) -> JobRow | None:
    r = await repo.job(conn, job_id)
    if r is None:
        return None
    return JobRow(
        r["job_id"],
        r["status"],
        r["lineage"],
        r["run_id"],
        r["instance_id"],
        r["request"],
        Counters(r["observed_user_turns"], r["observed_model_steps"]),
    )


@dataclass(frozen=True)
class GainSettings:
    """What the gain check of a ratio-started compaction (``domain.compaction.gain``)
    needs of the deployment: whether its summarizer is a billed model, the tokens that
    model reads per job besides the groups (its instruction), and the named model
    profiles a policy's purposes may be budgeted on (``ALC_MODEL_PROFILES_FILE``)."""

    model_summarizer: bool = False
    summarizer_overhead: int = 0
    profiles: Mapping[str, ModelProfile] = field(default_factory=dict)

    def prices(
        self, policy: ContextPolicy, release_profile: Mapping[str, Any] | None
    ) -> tuple[ModelPrices | None, ModelPrices | None]:
        """The prices of the action calls a compaction saves on, and of the summarizer's
        calls: each purpose's profile's (validated at publish)."""
        action = purpose_prices(policy, "action", release_profile, self.profiles)
        return action, purpose_prices(policy, "compaction", release_profile, self.profiles)


async def frontier_of(
    conn: asyncpg.Connection, session_id: str, lineage: str, run_id: str, instance_id: str
) -> Frontier:
    """The plan and constraints of a job's thread: the main thread's, or its child's
    (R13.1). Its task version is not counted (0): a job's is counted through its view's
    watermark (``task_version``)."""
    if lineage == "main":
        return await read_frontier(conn, session_id, run_id, instance_id, child=False, tasks=False)
    return await thread_frontier(conn, session_id, run_id, instance_id, tasks=False)


def _columns(state: Mapping[str, object]) -> dict[str, object]:
    """The lineage's columns to update, a ``LastAttempt`` as its JSON (its fields as they
    are, read back by ``summaries.last_attempt_of``)."""
    return {k: asdict(v) if isinstance(v, LastAttempt) else v for k, v in state.items()}


class PgControlStore(CachedViews):
    """The control half of the processor's store (``streams.control``): the facts a
    budget observation or a compaction outcome is decided on, and the one writer of the
    decided effects, over the batch's connection."""

    conn: asyncpg.Connection
    gain: GainSettings = GainSettings()

    async def observation_inputs(
        self, ev: ControlEvent, obs: BudgetObservation
    ) -> ObservationInputs | Checked:
        """Lock the lineage's state and read what the observation is decided on, or what
        its check decided when it was checked already (a redelivery). (The view does not
        depend on the state columns the decision writes, so reading it first is the same
        as reading it after them.)"""
        conn = self.conn
        lineage = await self.lineage_of(ev)
        # A main view's records after the observation are counted under the same lock.
        after = (obs.view_watermark, ev.run_id) if lineage == "main" else None
        locked = await compaction_state.lock_with_context(
            conn, ev.session_id, lineage, ev.event_key, after
        )
        if locked.checked is not None:
            return locked.checked
        ctx, row, job = locked.context, locked.row, locked.job
        full = policy_of(ctx["policy_revision"], ctx["context_policy"])
        policy = full.compaction
        # R2.6/R2.7: counters of this run's view, and the baseline of the newest summary
        # this view may reuse — not simply the newest summary of the session. (R13.1: a
        # child has its own counters and its own summary chain.) The job in flight is the
        # locked row's, not the view's: the decision may just let it go (R15.3).
        view = await self._view(
            ev.session_id,
            ev.run_id,
            lineage,
            stamp_of(ctx, row.current_summary_id),
            session_counters(ctx),
            row.active_job_id,
        )
        # Decided on the view the observer saw, not on records that overtook its observation.
        later = locked.later
        if later is None:
            later = await counted_after(
                conn, view, obs.view_watermark, int(ctx["next_session_sequence"])
            )
        prices, summarizer_prices = self.gain.prices(full, ctx["model_profile"])
        return ObservationInputs(
            ev,
            obs,
            lineage,
            policy,
            ctx["policy_revision"],
            LockedState(row.last_attempt, row.active_job_id, row.attempts),
            job,
            view.counters.as_seen(later, view.baseline),
            view.baseline,
            view.summary_id,
            prices,
            self.gain.model_summarizer,
            summarizer_prices,
            self.gain.summarizer_overhead,
            full.large_result_policy.inline_max_tokens,
        )

    async def task_version(
        self,
        session_id: str,
        lineage: str,
        run_id: str,
        instance_id: str,
        through: int,
    ) -> int:
        """R11.6: user inputs and supplements of the lineage up to ``through``."""
        conn = self.conn
        if lineage == "main":
            return await repo.task_version(conn, session_id, through)
        return await repo.thread_task_version(conn, session_id, run_id, instance_id, through)

    async def frontier_versions(
        self, session_id: str, lineage: str, run_id: str, instance_id: str
    ) -> tuple[int, int]:
        f = await frontier_of(self.conn, session_id, lineage, run_id, instance_id)
        return f.plan.version, f.constraints_version

    async def waiting_requests(self, session_ids: list[str]) -> list[CompactionRequest]:
        """The requests of the jobs ``session_ids``' lineages wait on that no worker
        answered yet (``requested``), as they were sent; an unreadable one is left to
        expire (R15.3)."""
        rows = await self.conn.fetch(
            "SELECT j.request FROM compaction_state c"
            " JOIN compaction_jobs j ON j.job_id = c.active_job_id"
            " WHERE c.session_id = ANY($1::text[]) AND j.status = 'requested'"
            " ORDER BY j.session_id, j.job_id",
            session_ids,
        )
        requests = []
        for r in rows:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                requests.append(request_of(r["request"]))
        return requests

    async def outcome_inputs(self, ev: ControlEvent, out: CompactionOutcome) -> OutcomeInputs:
        conn = self.conn
        job = await job_row(conn, out.job_id)
        if job is None or job.status != "requested":
            return OutcomeInputs(ev, out, job)
        locked = await compaction_state.lock_with_context(conn, ev.session_id, job.lineage)
        ctx, row = locked.context, locked.row
        if out.status != "succeeded":
            return OutcomeInputs(ev, out, job, ctx["policy_revision"])
        view = await self._view(
            ev.session_id,
            job.run_id,
            job.lineage,
            stamp_of(ctx, row.current_summary_id),
            session_counters(ctx),
            row.active_job_id,
        )
        covered = list(out.covered_record_ids)
        frontier = await frontier_of(conn, ev.session_id, job.lineage, job.run_id, job.instance_id)
        current = view.summary.covered_record_ids if view.summary else ()
        fresh = to_verify(covered, out.parent_summary_id, view.summary_id, current)
        return OutcomeInputs(
            ev,
            out,
            job,
            ctx["policy_revision"],
            view.summary_id,
            await self.task_version(
                ev.session_id,
                job.lineage,
                job.run_id,
                job.instance_id,
                int(job.request["view_watermark"]),
            ),
            await repo.missing_records(conn, ev.session_id, fresh) if fresh else 0,
            await repo.revoked_records(
                conn, ev.session_id, covered, int(job.request["view_watermark"])
            ),
            view.through,
            frontier.plan,
            frontier.constraints_version,
            row.last_attempt,
        )

    async def apply_control(self, effects: ControlEffects) -> None:
        """The one writer of control decisions: summary, finished jobs, trigger report, new
        job and the lineage's state (columns merged in decision order), in the caller's
        transaction."""
        conn = self.conn
        sid, lineage = effects.session_id, effects.lineage
        self.probed.pop(sid, None)  # its stamp moves
        if effects.summary is not None:
            await repo.insert_summary(conn, **effects.summary)
        for done in effects.finished:
            await repo.finish_job(conn, done.job_id, done.status, done.stage, done.reason)
        # The lineage's state goes with the report unless a new job must be inserted first.
        state = _columns(effects.state) if effects.state else None
        with_report = state if effects.new_job is None else None
        if (r := effects.report) is not None:
            await repo.insert_report(
                conn,
                sid,
                lineage,
                r.run_id,
                r.event_key,
                r.decision,
                r.kind,
                r.reason,
                r.job_id,
                r.policy_revision,
                r.view_watermark,
                r.totals,
                r.baseline,
                then=with_report,
            )
            state = None if with_report else state
        if (job := effects.new_job) is not None:
            req = job.request
            await repo.insert_job(
                conn,
                req.job_id,
                sid,
                lineage,
                req.run_id,
                req.instance_id,
                {**req.__dict__, "trigger_reasons": list(req.trigger_reasons)},
                job.observed,
            )
        if state:
            await repo.update_lineage(conn, sid, lineage, state)
        if effects.view_tokens is not None:
            covered, summary = effects.view_tokens
            await compaction_state.replace_view_tokens(conn, sid, lineage, covered, summary)
