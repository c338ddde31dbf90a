"""``PgPreemptReads``: what the processor's pre-emptive checks (``streams.control``
``preempt``) read over the batch's connection — the main lineages due a check, each read
with its view's stamp and counters, and their main views through the cache
(``storage.compaction.view_cache``)."""

from __future__ import annotations

from domain.compaction.preemption import PreemptCandidate
from domain.compaction.triggers import REBUILD_DUE
from domain.context.rendering import RecordView
from domain.policy.parsed import policy_of
from storage.compaction.view_cache import (
    CachedViews,
    Uncovered,
    session_counters,
    stamp_of,
    view_of,
)
from storage.compaction.view_state import ViewState
from storage.records import threads


class PgPreemptReads(CachedViews):
    """The pre-emptive checks' reads (``storage.processor_store.ControlStore``)."""

    async def preempt_candidates(self, session_ids: list[str]) -> list[PreemptCandidate]:
        conn = self.conn
        rows = await conn.fetch(
            "SELECT c.session_id, s.active_run_id, r.context_policy,"
            " r.policy_revision AS release_policy, c.fixed_overhead, c.view_tokens,"
            " c.input_budget, c.required_tokens, c.current_summary_id, c.active_job_id,"
            " s.next_session_sequence, s.user_turns, s.model_steps FROM compaction_state c"
            " JOIN sessions s USING (session_id) JOIN releases r USING (release_id)"
            " WHERE c.session_id = ANY($1::text[]) AND c.lineage = 'main'"
            " AND c.input_budget > 0 AND c.active_job_id IS NULL AND (c.last_attempt IS NULL"
            f" OR c.last_attempt->>'rebuild' = '{REBUILD_DUE}')"
            " AND s.active_run_id IS NOT NULL",
            session_ids,
        )
        self.probed = {
            r["session_id"]: (
                stamp_of(r, r["current_summary_id"]),
                session_counters(r),
            )
            for r in rows
        }
        return [
            PreemptCandidate(
                r["session_id"],
                r["active_run_id"],
                policy_of(r["release_policy"], r["context_policy"]),
                r["release_policy"],
                int(r["fixed_overhead"]),
                int(r["view_tokens"]),
                int(r["input_budget"]),
                int(r["required_tokens"]),
            )
            for r in rows
        ]

    async def main_view(self, session_id: str, run_id: str) -> ViewState:
        """A candidate's main view, at the stamp its candidate row was read with."""
        probed = self.probed.get(session_id)
        if probed is None:
            return await view_of(self.conn, session_id, run_id, "main")
        return await self._view(session_id, run_id, "main", *probed)

    async def view_records(
        self,
        session_id: str,
        run_id: str,
        main_instance_id: str,
        through: int,
        covered: frozenset[str] = frozenset(),
        epoch: str | None = None,
    ) -> list[RecordView]:
        # Selection ignores covered records: a long, summarized history is not read again
        # (with its content) on every pre-emptive check.
        inherited = await self._inherited(session_id, through, covered, epoch)
        own = await threads.thread_records(self.conn, session_id, run_id, main_instance_id, through)
        return inherited + own

    async def _inherited(
        self, session_id: str, through: int, covered: frozenset[str], epoch: str | None
    ) -> list[RecordView]:
        """The inherited records ``covered`` leaves shown. With the view's revocation
        ``epoch``, those kept from the session's last check continue (only the records
        after them are read): each check read the session's whole history, ~2-3 ms at
        1,400 records (issue 37)."""
        tx = self.views
        if tx is None or epoch is None:
            return await threads.uncovered_records(self.conn, session_id, through, covered)
        kept = tx.cache.uncovered.get(session_id)
        if kept is not None and kept.serves(through, covered, epoch):
            tail: list[RecordView] = []
            if through > kept.through:
                tail = await threads.inherited_range(self.conn, session_id, kept.through, through)
            inherited = [r for r in (*kept.records, *tail) if r.record_id not in covered]
        else:
            inherited = await threads.uncovered_records(self.conn, session_id, through, covered)
        # Kept through what was committed before this transaction: its own records go
        # with it if it rolls back.
        committed = min(through, tx.first_written.get(session_id, through + 1) - 1)
        shown = tuple(r for r in inherited if r.session_sequence <= committed)
        tx.cache.keep_uncovered(session_id, Uncovered(committed, covered, epoch, shown))
        return inherited
