"""Prepare keeps each thread's task count (R11.6) as it last read it and hands it to the
next read, which counts only the inputs since (a long thread's thousands of inputs are
not counted again at every prepare: ``storage.records.thread_frontier``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from domain.context.rendering import RecordView
from domain.frontier import Frontier
from services.prepare.assembly.views import ThreadViews
from storage.compaction.thread_view import ThreadRead
from storage.records.thread_frontier import FrontierQuery, TaskCount
from storage.records.threads import Snapshot
from tests.unit.test_cold_views import CountingThreads
from tests.unit.test_render_state import COUNT, PROFILE

SID, RUN = "s1", "r1"


@dataclass
class GrowingFrontier:
    """A thread whose inputs grow by one between reads; keeps what each read was given."""

    given: list[TaskCount | None] = field(default_factory=list)
    inputs: int = 0
    with_main: int = 0  # reads made with the main view's row (``ThreadViews.early``)

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
        counted = TaskCount(10 * self.inputs, self.inputs)
        return [], Frontier(task_version=self.inputs), counted

    async def own_frontier_and_main(
        self,
        scope: tuple[str, str, str],
        after: int,
        query: FrontierQuery,
        tasks: TaskCount | None,
        through: int,
    ) -> ThreadRead:
        own, found, counted = await self.own_and_frontier(*scope, after, query, tasks)
        self.with_main += 1
        return ThreadRead(own, found, counted, {"through": through})  # type: ignore[arg-type]


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


@pytest.mark.spec("R11.6", "R4.4")
async def test_a_read_made_with_the_lineage_serves_the_view_it_was_read_after_only() -> None:
    """A prepare reads a cached view's new records with its lineage's row, before it
    takes the view (``ThreadViews.early``): the view uses that read, unless it is not
    the view it was read after (rebuilt) or no longer at that sequence (fed meanwhile),
    or the read was of another frontier; then it reads again."""
    snaps = {(SID, RUN): Snapshot(1, SID, RUN, "main", 0, "p1", "active")}
    frontier = GrowingFrontier()
    views = ThreadViews(CountingThreads(snapshots=snaps), COUNT, frontier=frontier)
    overhead, scope, query = PROFILE.message_overhead, (SID, RUN, "main"), FrontierQuery(False)
    assert await views.early(scope, query, 0) is None  # no cached view: it reads its own
    await views.view_and_frontier(scope, NoReads(), query, overhead)  # type: ignore[arg-type]
    reads = len(frontier.given)
    early = await views.early(scope, query, 0)
    assert early is not None and early.read.main["through"] == 0
    _, _, found = await views.view_and_frontier(scope, NoReads(), query, overhead, early=early)  # type: ignore[arg-type]
    assert len(frontier.given) == reads + 1 and found == early.read.frontier  # taken
    stale = await views.early(scope, query, 0)
    assert stale is not None
    stale.rend.last_sequence += 1  # the view was fed meanwhile (another prepare)
    await views.view_and_frontier(scope, NoReads(), query, overhead, early=stale)  # type: ignore[arg-type]
    assert len(frontier.given) == reads + 3  # read again
    other = await views.early(scope, FrontierQuery(False, inherit_constraints=False), 0)
    await views.view_and_frontier(scope, NoReads(), query, overhead, early=other)  # type: ignore[arg-type]
    assert len(frontier.given) == reads + 5  # another frontier's read: read again
