"""A new run's main view continued from the session's kept history (issue 37): what it
prepares, and everything its renderer holds, equals the view rendered from scratch
(R2.2, R2.3, R4.3), for every run of random sessions, with and without a summary; a run
resumed under an older snapshot, another summary or another epoch renders in full."""

from __future__ import annotations

import random

import pytest

from domain.context.rendering import RecordView, ThreadRenderer
from services.prepare.assembly.history import (
    CONTAINERS,
    SCALARS,
    SETTINGS,
    copy_renderer,
    resummarized,
)
from services.prepare.assembly.views import ThreadViews
from storage.records.threads import Snapshot, SummaryView
from tests.unit.test_cold_views import CountingThreads
from tests.unit.test_render_state import COUNT, LARGE, PROFILE, _prepared, _records, _state

SID = "s1"


def _session(n: int, seed: int) -> tuple[CountingThreads, list[str], list[RecordView]]:
    """A session of ``n`` records whose runs each got a snapshot at their first record."""
    records, _ = _records(n, seed)
    runs: list[str] = []
    snapshots: dict[tuple[str, str], Snapshot] = {}
    for r in records:
        if r.run_id not in runs:
            run = str(r.run_id)
            runs.append(run)
            through = r.session_sequence - 1
            snapshots[(SID, run)] = Snapshot(len(runs), SID, run, f"i-{run}", through, "p", "")
    return CountingThreads(snapshots=snapshots, records=records), runs, records


async def _both(
    views: ThreadViews, threads: CountingThreads, run: str, summary: SummaryView | None, epoch: str
) -> tuple[bytes, bytes]:
    """(prepared, state) of ``views``'s view of ``run`` and of a from-scratch one."""
    out = []
    fresh = ThreadViews(CountingThreads(threads.snapshots, threads.records), COUNT)
    overhead = PROFILE.message_overhead
    for v in (views, fresh):
        rend, _ = await v.view(SID, run, f"i-{run}", overhead, summary, epoch, LARGE)
        out.append((_prepared(rend), _state(rend)))
    assert out[0] == out[1]
    return out[0]


@pytest.mark.spec("R2.2", "R2.3", "R4.3")
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("with_summary", [False, True])
async def test_every_new_run_continues_the_history_as_a_full_render_would(
    seed: int, with_summary: bool
) -> None:
    threads, runs, records = _session(random.Random(seed).randint(120, 600), seed)
    summary = None
    if with_summary:
        covered = frozenset(r.record_id for r in records[: len(records) // 3])
        summary = SummaryView("sum1", "what happened before", 17, covered)
    views = ThreadViews(threads, COUNT)
    for run in runs:
        await _both(views, threads, run, summary, "e1")
    assert threads.inherited_reads == 1  # the first run only: every later one continued


@pytest.mark.spec("R2.5", "R15.3")
async def test_an_older_snapshot_or_another_fingerprint_renders_in_full() -> None:
    threads, runs, records = _session(400, 7)
    views = ThreadViews(threads, COUNT)
    for run in (runs[0], runs[4], runs[1]):  # runs[1]: resumed under an older snapshot
        await _both(views, threads, run, None, "e1")
    assert threads.inherited_reads == 2
    await _both(views, threads, runs[5], None, "e1")  # continues from runs[4]'s, kept
    assert threads.inherited_reads == 2
    covered = frozenset(r.record_id for r in records[:50])
    await _both(views, threads, runs[6], SummaryView("s2", "s", 3, covered), "e1")
    assert threads.inherited_reads == 2  # a summary covering more: re-summarized
    less = frozenset(r.record_id for r in records[:20])  # shows what the kept one left out
    await _both(views, threads, runs[7], SummaryView("s3", "s", 3, less), "e1")
    assert threads.inherited_reads == 3
    await _both(views, threads, runs[8], None, "e2")  # a retraction or revocation since
    assert threads.inherited_reads == 4


@pytest.mark.spec("R2.2", "R2.3", "R2.7", "R4.3", "R11.1")
@pytest.mark.parametrize("seed", range(8))
async def test_a_roll_up_re_summarizes_the_kept_history_as_a_full_render_would(seed: int) -> None:
    """Issue 37: each compaction's new summary rendered the session's whole history again
    (read from PostgreSQL: ~10 ms at 1,400 records, growing with the session). A summary
    covering at least what the kept history's covers re-summarizes it in memory. Each
    roll-up here covers what the one before covered and more, often not a prefix (a
    kept group stays shown); some are committed during a run and cover its records."""
    rng = random.Random(seed)
    threads, runs, records = _session(rng.randint(150, 600), seed)
    views = ThreadViews(threads, COUNT)
    covered: set[str] = set()
    summary = None
    for i, run in enumerate(runs):
        first = next(k for k, r in enumerate(records) if r.run_id == run)
        if first and rng.random() < 0.6:
            upto = rng.randrange(max(1, first - 40), first + 1)
            covered |= {r.record_id for r in records[:upto] if rng.random() < 0.9}
            summary = SummaryView(f"sum{i}", f"all before run {i}", 11 + i, frozenset(covered))
        await _both(views, threads, run, summary, "e1")
        if summary is not None and rng.random() < 0.5:  # committed during the run
            covered |= {r.record_id for r in records if r.run_id == run and rng.random() < 0.5}
            summary = SummaryView(f"sum{i}b", "and some of this run", 5, frozenset(covered))
            await _both(views, threads, run, summary, "e1")
    assert threads.inherited_reads == 1  # the first run only


def test_a_copy_knows_every_attribute_of_a_renderer() -> None:
    assert set(vars(ThreadRenderer(COUNT))) == SETTINGS | SCALARS | CONTAINERS


def _feed(rend: ThreadRenderer, records: list[RecordView], start: int) -> None:
    for r in records:
        if r.session_sequence == start + 1:
            rend.seal_inherited()
        rend.feed(r, inherited=r.session_sequence <= start)


@pytest.mark.parametrize("seed", range(4))
def test_a_copy_goes_on_alone_and_leaves_its_source_as_it_was(seed: int) -> None:
    records, start = _records(300, seed)
    cut = random.Random(seed).randrange(1, start)  # often inside an open group
    src, whole = ThreadRenderer(COUNT, 4, large=LARGE), ThreadRenderer(COUNT, 4, large=LARGE)
    _feed(src, records[:cut], start)
    before = _state(src)
    copy = copy_renderer(src)
    _feed(copy, records[cut:], start)
    _feed(whole, records, start)
    assert _state(src) == before
    assert _state(copy) == _state(whole)
    assert _prepared(copy) == _prepared(whole)


def _grouped_skill_history() -> list[RecordView]:
    """A question whose call loaded a skill (a result in its call's group, so its message
    is where the skill's body is shown), then a later question."""
    skill = {"name": "deploy", "revision": "2"}
    call = {"call_id": "c1", "name": "load_skill", "arguments_json": "{}"}
    rows = [
        ("user_input", "deploy it", {}, None),
        ("assistant_message", "loading", {"tool_calls": [call]}, None),
        ("tool_outcome", "skill body", {"call_id": "c1", "name": "load_skill", "skill": skill},
         "ab" * 32),
        ("resource_activation", "", {"resource_kind": "skill", "resource_id": "deploy",
         "version": "2", "content_hash": "ab" * 32}, None),
        ("assistant_message", "done", {}, None),
        ("user_input", "and now?", {}, None),
    ]  # fmt: skip
    return [
        RecordView(
            f"g{i}",
            i,
            "r0" if i <= 5 else "r1",
            "i",
            kind,
            "host",
            text,
            payload,
            3,
            -1,
            sha or f"{i:064x}",
        )
        for i, (kind, text, payload, sha) in enumerate(rows, start=1)
    ]


@pytest.mark.spec("R12.3")
@pytest.mark.parametrize(
    ("before", "after"),
    [
        ((), ("g1",)),  # the load shown under both: found again where it now is
        ((), ("g2", "g3", "g4")),  # shown, then covered
        (("g1", "g2", "g3", "g4", "g5"), ("g6",)),  # covered under both
    ],
)
def test_a_re_summarized_history_shows_a_skill_load_where_a_full_render_does(
    before: tuple[str, ...], after: tuple[str, ...]
) -> None:
    records = _grouped_skill_history()
    first = SummaryView("s1", "before", 4, frozenset(before))
    second = SummaryView("s2", "more and longer", 6, first.covered | set(after))

    def rendered(summary: SummaryView) -> ThreadRenderer:
        rend = ThreadRenderer(COUNT, 4, summary.covered, summary.summary_id, LARGE)
        rend.add_summary(summary.text, summary.tokens)
        for r in records:
            rend.feed(r, inherited=True)
        return rend

    kept = rendered(first)
    again = resummarized(kept, second)
    assert _state(again) == _state(rendered(second))
    assert _prepared(again) == _prepared(rendered(second))
    shown = again.skill_loads["ab" * 32].message_index
    assert (shown is None) == ("g3" in second.covered)
