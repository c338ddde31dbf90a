"""``ThreadViews`` after a restart (issue 13: cold prepare): a view continues from its
stored render state, reads no inherited history, and prepares exactly what the view that
never stopped prepares (R4.3); a changed summary or revocation epoch is never served
from an older state (R11.8, R15.3)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from domain.context.rendering import RecordView
from services.prepare.assembly.views import ThreadViews
from storage.calls.render_states import MemoryRenderStates, StoredState
from storage.records.threads import Inherited, Snapshot, SummaryView
from tests.unit.fakes.prepare import FakeThreads
from tests.unit.test_render_state import COUNT, LARGE, PROFILE, _prepared, _records

SID, RUN, INST = "s1", "cur", "i-cur"


@dataclass
class CountingThreads(FakeThreads):
    inherited_reads: int = 0
    own_reads: int = 0

    async def inherited(
        self, session_id: str, through: int, covered: frozenset[str] = frozenset()
    ) -> Inherited:
        self.inherited_reads += 1
        return await super().inherited(session_id, through, covered)

    async def own(
        self, session_id: str, run_id: str, instance_id: str, after: int
    ) -> list[RecordView]:
        found = await super().own(session_id, run_id, instance_id, after)
        self.own_reads += len(found)
        return found


def _threads(n: int) -> tuple[CountingThreads, list[RecordView]]:
    records, start = _records(n, seed=n)
    snap = Snapshot(1, SID, RUN, INST, start, "p1", "active")
    threads = CountingThreads(snapshots={(SID, RUN): snap})
    return threads, records


def _views(threads: CountingThreads, states: MemoryRenderStates) -> ThreadViews:
    return ThreadViews(threads, COUNT, states=states, counting="estimate")


async def _view(views: ThreadViews, summary: SummaryView | None, epoch: str = "e1") -> bytes:
    rend, _ = await views.view(SID, RUN, INST, PROFILE.message_overhead, summary, epoch, LARGE)
    return _prepared(rend)


@pytest.mark.spec("R4.3")
@pytest.mark.parametrize("n", [80, 1200])
@pytest.mark.parametrize("with_summary", [False, True])
async def test_a_restarted_view_continues_from_its_stored_state(n: int, with_summary: bool) -> None:
    threads, records = _threads(n)
    summary = None
    if with_summary:
        covered = frozenset(r.record_id for r in records[: n // 3])
        summary = SummaryView("sum1", "what happened before", 17, covered)
    states = MemoryRenderStates()
    warm = _views(threads, states)
    current = records.index(next(r for r in records if r.run_id == RUN))
    threads.records = records[: current + (n - current) // 2]
    await _view(warm, summary)
    await warm.flush()
    assert states.saves == 1  # stored after the full render
    threads.records = records
    before = await _view(warm, summary)
    # A restart: a new process with nothing in memory.
    threads.inherited_reads = threads.own_reads = 0
    cold = _views(threads, states)
    assert await _view(cold, summary) == before
    assert threads.inherited_reads == 0  # no history read again, only what is new
    assert threads.own_reads == len(records) - len(records[: current + (n - current) // 2])
    # Both go on identically.
    late = RecordView("late", n + 1, RUN, INST, "user_input", "user", "more", {}, 2)
    threads.records = [*records, late]
    assert await _view(cold, summary) == await _view(warm, summary)


@pytest.mark.spec("R15.3")
async def test_another_epoch_or_summary_renders_in_full() -> None:
    threads, records = _threads(200)
    threads.records = records
    states = MemoryRenderStates()
    warm = _views(threads, states)
    await _view(warm, None, "e1")
    await warm.flush()
    reference = _views(FakeThreads(threads.snapshots, records), MemoryRenderStates())
    for summary, epoch in (
        (None, "e2"),
        (SummaryView("sum9", "s", 3, frozenset(r.record_id for r in records[:50])), "e1"),
    ):
        threads.inherited_reads = 0
        cold = _views(threads, states)
        got = await _view(cold, summary, epoch)
        assert threads.inherited_reads == 1
        assert got == await _view(reference, summary, epoch)


async def test_a_state_is_refreshed_once_the_view_grew_enough() -> None:
    threads, records = _threads(400)
    current = records.index(next(r for r in records if r.run_id == RUN))
    threads.records = records[: current + 1]
    states = MemoryRenderStates()
    views = _views(threads, states)
    await _view(views, None)
    for upto in range(current + 2, len(records) + 1):
        threads.records = records[:upto]
        await _view(views, None)
    await views.flush()
    fed = len(records) - current - 1
    # Not one write per prepare. (Writes are compressed in worker threads, so a newer
    # one may land first and an older one is then refused: count at least one.)
    assert 1 <= states.saves <= 2 + fed // 64
    stored = states.rows[(SID, RUN, INST)][1]
    assert stored.last_sequence > records[current].session_sequence


async def test_a_stored_state_is_compressed_and_a_damaged_one_renders_in_full() -> None:
    threads, records = _threads(300)
    threads.records = records
    states = MemoryRenderStates()
    warm = _views(threads, states)
    before = await _view(warm, None)
    await warm.flush()
    fp, stored = states.rows[(SID, RUN, INST)]
    assert stored.data.startswith(b"ALC-render-state/4+zstd\n")  # what PostgreSQL holds
    # A damaged row (a torn write, a bad disk): the view renders from the records instead
    # of failing the prepare.
    damaged = stored.data[:40] + bytes(64) + stored.data[104:]
    states.rows[(SID, RUN, INST)] = (fp, StoredState(stored.last_sequence, damaged))
    threads.inherited_reads = 0
    cold = _views(threads, states)
    assert await _view(cold, None) == before
    assert threads.inherited_reads == 1
