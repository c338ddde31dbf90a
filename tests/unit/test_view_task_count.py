"""Prepare keeps each thread's task count (R11.6) as it last read it and hands it to the
next read, which counts only the inputs since (a long thread's thousands of inputs are
not counted again at every prepare: ``storage.records.thread_frontier``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from domain.context.rendering import RecordView
from domain.frontier import Frontier
from services.prepare.assembly.views import ThreadViews
from storage.records.thread_frontier import FrontierQuery, TaskCount
from storage.records.threads import Snapshot
from tests.unit.test_cold_views import CountingThreads
from tests.unit.test_render_state import COUNT, PROFILE

SID, RUN = "s1", "r1"


@dataclass
class GrowingFrontier:
    """A thread whose inputs grow by one between reads; keeps what each read was given.
    ``inherits``: a main read also counts the session's inherited inputs (100 + after)."""

    given: list[TaskCount | None] = field(default_factory=list)
    inputs: int = 0
    inherits: bool = False
    queries: list[FrontierQuery] = field(default_factory=list)

    async def own_and_frontier(
        self,
        session_id: str,
        run_id: str,
        instance_id: str,
        after: int,
        query: FrontierQuery,
        tasks: TaskCount | None = None,
    ) -> tuple[list[RecordView], Frontier, TaskCount]:
        self.given.append(tasks)
        self.inputs += 1
        self.queries.append(query)
        inherited = 100 + after if self.inherits and query.inherited else None
        counted = TaskCount(10 * self.inputs, self.inputs, inherited)
        return [], Frontier(task_version=self.inputs), counted


class NoReads:
    async def read(self, *args: object, **kwargs: object) -> Frontier:
        raise AssertionError("the frontier is read with the view's records")


@pytest.mark.spec("R11.6")
async def test_each_threads_task_count_is_handed_to_its_next_read() -> None:
    snaps = {
        (SID, RUN): Snapshot(1, SID, RUN, "main", 0, "p1", "active"),
    }
    frontier = GrowingFrontier()
    views = ThreadViews(CountingThreads(snapshots=snaps), COUNT, frontier=frontier)
    overhead = PROFILE.message_overhead
    seen = []
    for instance in ("main", "main", "child", "main"):
        scope = (SID, RUN, instance)
        query = FrontierQuery(child=instance != "main")
        _, _, found = await views.view_and_frontier(scope, NoReads(), query, overhead)  # type: ignore[arg-type]
        seen.append(found.task_version)
    # Each thread continues its own last count; a thread read first starts from none.
    assert frontier.given == [None, TaskCount(10, 1), None, TaskCount(20, 2)]
    assert seen == [1, 2, 3, 4]


@pytest.mark.spec("R11.6")
async def test_a_new_runs_first_count_starts_from_the_sessions_inherited_inputs() -> None:
    """Issue 37: a new run's main thread starts from the inherited inputs a read of an
    earlier run counted, through a snapshot at or before its own; a run resumed under an
    older snapshot, and a child, start from none."""
    snaps = {
        (SID, run): Snapshot(n, SID, run, "main", through, "p1", "active")
        for n, (run, through) in enumerate((("r1", 10), ("r2", 20), ("r0", 5)), start=1)
    }
    frontier = GrowingFrontier(inherits=True)
    views = ThreadViews(CountingThreads(snapshots=snaps), COUNT, frontier=frontier)
    for run, instance in (("r1", "main"), ("r2", "main"), ("r2", "child"), ("r0", "main")):
        query = FrontierQuery(child=instance != "main")
        await views.view_and_frontier((SID, run, instance), NoReads(), query, 4)  # type: ignore[arg-type]
    # r1 counted 100 + 10 inherited inputs through its snapshot (10): r2 (20) starts there.
    assert frontier.given == [None, TaskCount(10, 110), None, None]
    # Only a main thread's first read counts them (a later read continues its own count).
    assert [q.inherited for q in frontier.queries] == [True, True, False, True]
