"""benchmarks.frontier on a small seeded session: every method probed, ours keeps the goal,
the constraints in force (and no retired one) and the current plan after every compaction;
the recorded variant keeps what the author recorded (the worker's ``merge_job``), closes a
question only by its ``question_closed``, and its records have the store's shapes."""

from __future__ import annotations

import asyncio

from benchmarks import frontier as bench
from benchmarks.summary_fidelity import MemoCounter, Summary, norm
from domain.compaction.authored import DECISION_RECORDED, QUESTION_CLOSED, QUESTION_OPENED
from domain.frontier import CONSTRAINT_RETIRED, CONSTRAINT_SET


def test_small_session_probes_all_methods_and_keeps_the_frontier() -> None:
    result = asyncio.run(bench.run(seed=7, questions=40))
    assert result["variant"] == bench.PHRASED
    assert result["compactions"] >= 5
    assert result["failed_jobs"] == 0
    rows = result["rows"]
    for probe in bench.PROBES:
        assert set(rows[probe]) == set(bench.METHODS)
        assert all(v is not None for v in rows[probe].values())
    for probe in ("goal", "constraints", "plan"):
        assert rows[probe]["ours"] == 1.0
    result["targets"] = bench.targets(result)
    assert bench.binding_held(result)  # goal, constraints, plan: the decisions are info
    assert bench.BINDING[bench.PHRASED] == tuple(bench.TARGETS)[:3]


def test_the_recorded_variant_keeps_recorded_decisions_and_open_questions() -> None:
    result = asyncio.run(bench.run(seed=7, questions=40, recorded=True))
    assert result["variant"] == bench.RECORDED
    assert result["failed_jobs"] == 0
    assert all(result["authored_records"].values())
    rows = result["rows"]
    assert (rows["decisions recall"]["ours"] or 0) >= 0.9
    assert (rows["open questions recall"]["ours"] or 0) >= 0.8
    assert result["answered_still_open"] == 0.0
    assert bench.BINDING[bench.RECORDED] == tuple(bench.TARGETS)
    held = bench.targets(result)
    for name, (row, _) in bench.TARGETS.items():  # a short session has few roll-ups
        assert held[name] or rows[row]["ours"] is None, name


def test_the_variants_are_the_same_session_but_for_the_authored_records() -> None:
    counter = MemoCounter()
    plain = bench.make_session(7, 40, counter.count)
    recorded = bench.make_session(7, 40, counter.count, recorded=True)
    authored = {DECISION_RECORDED, QUESTION_OPENED, QUESTION_CLOSED}
    assert not [r for r in plain.records if r.kind in authored]
    same = [(r.kind, r.text) for r in recorded.records if r.kind not in authored]
    assert same == [(r.kind, r.text) for r in plain.records]
    assert [k for _, k in recorded.decisions] == [k for _, k in plain.decisions]
    assert [k for _, k, _ in recorded.questions] == [k for _, k, _ in plain.questions]


def test_recorded_records_have_the_payloads_the_store_holds() -> None:
    s = bench.make_session(7, 40, MemoCounter().count, recorded=True)
    opened: dict[str, str] = {}
    closed = 0
    for r in s.records:
        if r.kind == DECISION_RECORDED:  # DecisionPayload: the decision is the content
            assert set(r.payload) <= {"reason"} and r.text
        elif r.kind == QUESTION_OPENED:  # QuestionPayload: its own event key
            assert set(r.payload) == {"question_key"} and r.text.rstrip("?.")
            assert r.payload["question_key"] not in opened
            opened[r.payload["question_key"]] = r.text
        elif r.kind == QUESTION_CLOSED:  # names an opened question; the answer as content
            assert set(r.payload) == {"question_key", "answer"}
            assert r.payload["question_key"] in opened and r.text == r.payload["answer"]
            closed += 1
        assert r.token_count >= 0 and r.instance_id == "main"
    decided = {norm(k) for _, k in s.decisions}
    assert {norm(r.text).rstrip(".") for r in s.records if r.kind == DECISION_RECORDED} == decided
    assert closed == sum(1 for *_, ans in s.questions if ans)


def test_a_closed_recorded_question_leaves_the_summarys_open_list() -> None:
    counter = MemoCounter()
    s = bench.make_session(7, 40, counter.count, recorded=True)
    jobs, parent = bench.Jobs(counter), None
    for upto, run in s.checkpoints:
        view = [r for r in s.records if r.session_sequence <= upto]
        parent = asyncio.run(jobs.job(view, parent, bench.frontier_at(s, upto, run), run)) or parent
    assert parent is not None
    draft = parent.draft
    closings = {r.record_id for r in s.records if r.kind == QUESTION_CLOSED}
    answered = [f for f in draft.verified_facts if f.recorded and set(f.source_ids) & closings]
    assert answered, "a closed recorded question is kept as answered, citing its closing"
    for f in draft.unresolved_questions:
        assert not (set(f.source_ids) & closings)
    assert any(f.recorded for f in draft.decisions)


def test_a_retired_constraint_is_absent_from_ours() -> None:
    counter = MemoCounter()
    s = bench.make_session(7, 40, counter.count)
    retired = [f for f in s.frontier if f.kind == CONSTRAINT_RETIRED]
    assert retired, "the small session retires a constraint"
    at = retired[0].session_sequence
    upto, run = next(c for c in s.checkpoints if c[0] >= at)
    gone = next(
        f.text
        for f in s.frontier
        if f.kind == CONSTRAINT_SET
        and f.payload["constraint_id"] == retired[0].payload["constraint_id"]
    )

    async def compact() -> Summary | None:
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


def test_the_bench_summary_shows_both_variants_worst_seed() -> None:
    from benchmarks import summary

    worst = {"decisions recall": 1.0, "open questions recall after >=10 roll-ups": 0.08}
    data = {"frontier": {"variants": {bench.RECORDED: {"worst_seed": worst}}}}
    rows = {r.measure: r for r in summary.build(data)}
    recorded = rows["frontier (recorded): decisions recall, worst seed"]
    assert (recorded.value, recorded.ceiling) == (1.0, "≥ 0.90")
    assert rows["frontier (recorded): open questions recall, worst seed"].value is None
    phrased = rows["frontier (phrasing only): decisions recall, worst seed"]
    assert phrased.value is None and phrased.ceiling.startswith("info")
