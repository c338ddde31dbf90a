"""The processor's pre-emptive probe reads a session's view state only when it needs it
(issue 37): with no counter trigger enabled (the default policy: the ratio alone) a probe
on the cached estimate that does not fire costs no read; one that fires, or a policy with a
counter trigger, reads the view as before (R9.1, R7.1-R7.3)."""

from __future__ import annotations

from typing import Any

import pytest

from domain.compaction.preemption import PreemptCandidate, reads_counters
from domain.compaction.trigger_kinds.kind import Counters
from domain.policy.context_policy import ContextPolicy, effective_policy
from streams.control import preempt


class Store:
    """The ``ControlStore`` reads ``preempt`` makes, counted; a view no job can start on
    (its main instance unknown), so a probe that fires stops after reading the view."""

    def __init__(self, policy: ContextPolicy, view_tokens: int) -> None:
        self.candidate = PreemptCandidate("s1", "r1", policy, "pol", 100, view_tokens, 1000, 100)
        self.views = 0

    async def preempt_candidates(self, session_ids: list[str]) -> list[PreemptCandidate]:
        return [self.candidate]

    async def main_view(self, session_id: str, run_id: str) -> Any:
        self.views += 1

        class View:
            counters = Counters(3, 9)
            baseline = Counters()

        return View()

    async def main_instance_id(self, session_id: str, run_id: str) -> str | None:
        return None


def policy(**compaction: Any) -> ContextPolicy:
    return effective_policy({"compaction": compaction})[0]


@pytest.mark.spec("R9.1", "R7.1")
async def test_a_ratio_only_probe_below_its_threshold_reads_no_view() -> None:
    store = Store(policy(), view_tokens=300)  # 400 of 1,000: below 0.8
    assert not reads_counters(store.candidate.policy.compaction)
    assert await preempt(store, ["s1"]) == []  # type: ignore[arg-type]
    assert store.views == 0


@pytest.mark.spec("R9.1", "R7.1")
async def test_a_ratio_probe_that_fires_reads_the_view() -> None:
    store = Store(policy(), view_tokens=800)  # 900 of 1,000: past 0.8
    await preempt(store, ["s1"])  # type: ignore[arg-type]
    assert store.views == 1


@pytest.mark.spec("R9.1", "R7.2", "R7.3")
@pytest.mark.parametrize("counter", ["user_turns", "model_steps"])
async def test_a_counter_trigger_reads_the_view_even_below_the_ratio(counter: str) -> None:
    store = Store(policy(**{counter: 2}), view_tokens=300)
    assert reads_counters(store.candidate.policy.compaction)
    await preempt(store, ["s1"])  # type: ignore[arg-type]
    assert store.views == 1
