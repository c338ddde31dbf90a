"""The processor's pre-emptive probe reads a session's view state only once a check on
the candidate's own row fires (issue 37): its cached estimate, the session's counters and
the main lineage's committed baseline. A probe that does not fire costs no read; one that
does reads the view and decides on the view's own values (R9.1, R7.1-R7.3, R8.4)."""

from __future__ import annotations

from typing import Any

import pytest

from domain.compaction.preemption import PreemptCandidate
from domain.compaction.trigger_kinds.kind import Counters
from domain.policy.context_policy import ContextPolicy, effective_policy
from streams.control import preempt


class Store:
    """The ``ControlStore`` reads ``preempt`` makes, counted; a view no job can start on
    (its main instance unknown), so a probe that fires stops after reading the view."""

    def __init__(self, policy: ContextPolicy, view_tokens: int, turns: int = 0) -> None:
        self.candidate = PreemptCandidate(
            "s1", "r1", policy, "pol", 100, view_tokens, 1000, 100, Counters(turns, 0)
        )
        self.views = 0

    async def preempt_candidates(self, session_ids: list[str]) -> list[PreemptCandidate]:
        return [self.candidate]

    async def main_view(self, session_id: str, run_id: str) -> Any:
        self.views += 1

        class View:
            counters = self.candidate.counters
            baseline = self.candidate.baseline

        return View()

    async def main_instance_id(self, session_id: str, run_id: str) -> str | None:
        return None


def policy(**compaction: Any) -> ContextPolicy:
    return effective_policy({"compaction": compaction})[0]


async def views_read(store: Store) -> int:
    await preempt(store, ["s1"])  # type: ignore[arg-type]
    return store.views


@pytest.mark.spec("R9.1", "R7.1")
async def test_a_probe_below_every_threshold_reads_no_view() -> None:
    assert await views_read(Store(policy(), view_tokens=300)) == 0  # 400 of 1,000 < 0.8
    # Counters below their period, on the candidate's row: no read either.
    assert await views_read(Store(policy(user_turns=4), view_tokens=300, turns=3)) == 0


@pytest.mark.spec("R9.1", "R7.1", "R7.2")
async def test_a_probe_that_fires_reads_the_view() -> None:
    assert await views_read(Store(policy(), view_tokens=800)) == 1  # 900 of 1,000
    assert await views_read(Store(policy(user_turns=4), view_tokens=300, turns=4)) == 1
