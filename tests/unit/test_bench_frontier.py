"""benchmarks.frontier on a small seeded session: every method probed, ours keeps the goal,
the constraints in force (and no retired one) and the current plan after every compaction."""

from __future__ import annotations

import asyncio

from benchmarks import frontier as bench
from benchmarks.summary_fidelity import MemoCounter, norm


def test_small_session_probes_all_methods_and_keeps_the_frontier() -> None:
    result = asyncio.run(bench.run(seed=7, questions=40))
    assert result["compactions"] >= 5
    assert result["failed_jobs"] == 0
    rows = result["rows"]
    for probe in bench.PROBES:
        assert set(rows[probe]) == set(bench.METHODS)
        assert all(v is not None for v in rows[probe].values())
    for probe in ("goal", "constraints", "plan"):
        assert rows[probe]["ours"] == 1.0
    checks = bench.targets(result)
    assert all(checks[k] for k in list(checks)[:3])


def test_a_retired_constraint_is_absent_from_ours() -> None:
    counter = MemoCounter()
    s = bench.make_session(7, 40, counter.count)
    retired = [f for f in s.frontier if f.kind == bench.CONSTRAINT_RETIRED]
    assert retired, "the small session retires a constraint"
    at = retired[0].session_sequence
    upto, run = next(c for c in s.checkpoints if c[0] >= at)
    gone = next(
        f.text
        for f in s.frontier
        if f.kind == bench.CONSTRAINT_SET
        and f.payload["constraint_id"] == retired[0].payload["constraint_id"]
    )

    async def compact() -> bench.Summary | None:
        jobs, parent = bench.Jobs(counter), None
        for c, on in s.checkpoints:
            if c > upto:
                break
            view = [r for r in s.records if r.session_sequence <= c]
            front = bench.frontier_at(s, c, on)
            parent = await jobs.job(view, parent, front, on) or parent
        return parent

    summary = asyncio.run(compact())
    assert summary is not None
    ours = bench.contexts(s, upto, run, summary, counter.count)["ours"]
    assert norm(gone) not in norm(ours)
    assert bench.probe(s, upto, run, ours)["constraints"] == (1, 1)
