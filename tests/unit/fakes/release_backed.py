"""Fakes of the processor's control store and the compaction worker's job store that read
the session's policy from a release published through the fake-backed Prepare
(``PrepareWorld``), as the PostgreSQL adapters read it from the ``releases`` row of the
session (``storage.compaction.control.observation_inputs``, ``PgCompactionJobs.session_policy``:
``policy_of(policy_revision, context_policy)``). Everything else the decision reads is a
fact the test sets; nothing here decides anything the product decides."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.compaction.control.effects import JobRow, LockedState, ObservationInputs
from domain.policy.context_policy import ContextPolicy
from domain.policy.parsed import policy_of
from schemas.wire import BudgetObservation, ControlEvent
from storage.releases import Release
from tests.unit.fakes.compaction import FakeCompactionJobs
from tests.unit.fakes.prepare import PrepareWorld
from tests.unit.fakes.processor import FakeProcessingStore


def release_of(world: PrepareWorld, session_id: str) -> Release:
    return world.releases.rows[world.sessions.rows[session_id].release_id]


def session_policy(world: PrepareWorld, session_id: str) -> ContextPolicy:
    """The session's release policy, parsed from the stored JSON as the adapters do."""
    rel = release_of(world, session_id)
    return policy_of(rel.policy_revision, rel.context_policy)


@dataclass
class ReleaseControlStore(FakeProcessingStore):
    """A control store whose observations are decided on the session's release; the
    view's counters, baseline and summary are those the world's compaction reads hold
    (what Prepare saw), the locked row and its job in flight are set by the test."""

    world: PrepareWorld = field(default_factory=PrepareWorld)
    locked: LockedState = field(default_factory=lambda: LockedState(None, None))
    active_job: JobRow | None = None

    async def observation_inputs(
        self, ev: ControlEvent, obs: BudgetObservation
    ) -> ObservationInputs:
        rel = release_of(self.world, ev.session_id)
        full = session_policy(self.world, ev.session_id)
        view = await self.world.compaction.state(ev.session_id, ev.run_id, obs.view_watermark)
        return ObservationInputs(
            ev,
            obs,
            "main",
            full.compaction,
            rel.policy_revision,
            self.locked,
            self.active_job,
            view.counters,
            view.baseline,
            view.summary_id,
            result_cap=full.large_result_policy.inline_max_tokens,
        )


@dataclass
class ReleaseCompactionJobs(FakeCompactionJobs):
    """The compaction worker's job store with the session's policy from its release."""

    world: PrepareWorld = field(default_factory=PrepareWorld)

    async def session_policy(self, session_id: str) -> ContextPolicy:
        return session_policy(self.world, session_id)
