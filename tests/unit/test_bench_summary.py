"""``benchmarks.summary``: the one ``make bench`` table, built from the benchmarks' JSON,
with "n/a" wherever a benchmark or a key is missing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.summary import Row, build, load, markdown

FIXTURE: dict[str, Any] = {
    "run": {
        "ingest": {
            "producer_ceiling_events_per_s": 20_000,
            "copy_ceiling_rows_per_s": 80_000,
            "faust_noop_events_per_s": 8_000,
            "drivers": {
                "faust": {"end_to_end_events_per_s": 2_000, "processor_drain_events_per_s": 4_000,
                          "processor_cpu_us_per_event": 300},
                "aiokafka": {"end_to_end_events_per_s": 10_000},
            },
        },
        "prepare": [{"records": 10_003, "server_p99_ms": 9.0}],
    },
    # The cold benchmark's own rows win over prepare_scale's for the same size.
    "prepare_cold": {
        "sizes": [
            {"records": 100_000, "cold_restart_p99_ms": 500.0, "warm_p99_ms": 20.0,
             "cold_full_p99_ms": 3000.0},
            {"records": 10_000, "target_p99_ms": 100.0},  # no numbers: the next source's
        ]
    },
    "prepare_scale": {"sizes": [{"records": 10_000, "cold": {"restart_p99_ms": 80.0}}]},
    "long_session": {"questions": 1000, "question_s_first_tenth": 0.5,
                     "question_s_last_tenth": 1.0, "question_s_growth": 2.0},
    "throughput": {
        "workers": [{"workers": 1, "jobs_per_s": 10.0}, {"workers": 2, "jobs_per_s": 18.0}]
    },
    "analytics": {
        "analytics_per_s": 900.0,
        "producer_ceiling_per_s": 18_000.0,
        "prepare_p99_ms_with_analytics": 12.0,
        "prepare_p99_ms_without_analytics": 10.0,
    },
    "fidelity": {
        "caps": {
            "400": {"ours": {"recall": 0.5}, "masking": {"recall": 0.25}},
            "roll-up x10": {"ours": {"recall": 0.6}},
            "masking@x10": {"recall": 0.3},
        }
    },
    "floor": {
        "processor_floor_us": 96.0,
        "faust_budget_us": 80.0,
        "e2e_floor_us": 75.0,
        "e2e_budget_us": 50.0,
    },
}  # fmt: skip


def by_measure(rows: list[Row]) -> dict[str, Row]:
    return {r.measure.strip(): r for r in rows}


def test_rows_carry_values_ceilings_and_ratios() -> None:
    rows = by_measure(build(FIXTURE))
    faust = rows["ingest end to end, faust driver"]
    assert (faust.value, faust.ratio) == (2_000, 0.1)
    assert "producer 20,000" in faust.ceiling
    assert rows["ingest end to end, aiokafka driver"].ratio == 0.5
    assert rows["(same) vs asyncpg COPY, aiokafka"].ratio == 0.125
    assert rows["processor draining a backlog, faust"].ratio == 0.5  # vs the no-op faust
    assert rows["no-op faust agent (the framework alone)"].value == 8_000
    assert (
        rows["cold prepare p99, 10,000 records, no summary, from its stored state"].ratio == 0.8
    )  # 80 of a 100 ms target
    assert rows["warm prepare p99, 10,000 records"].value == 9.0  # from benchmarks.run
    assert (
        rows["cold prepare p99, 100,000 records, no summary, from its stored state"].value == 500.0
    )
    assert rows["warm prepare p99, 100,000 records"].value == 20.0
    assert rows["cold prepare p99, 100,000 records, no summary, from its stored state"].ratio == 0.5
    full = rows["cold prepare p99, 100,000 records, no summary, full render (new epoch)"]
    assert (full.value, full.ratio) == (3000.0, 3.0)
    question = rows["long session (1,000 questions): a question, median, last tenth"]
    assert (question.value, question.ratio) == (1.0, 2.0)
    assert rows["compaction throughput, 2 worker processes"].ratio == 1.8
    assert rows["prepare p99 with the analytics group running"].ratio == 1.2
    assert rows["summary fidelity: fact recall at a 400-token cap, ours vs masking"].ratio == 2.0
    truncation = rows["summary fidelity: fact recall at a 400-token cap, ours vs truncation"]
    assert truncation.ratio is None  # not in the fixture
    assert rows["processor CPU per event, faust"].value == 300
    floor = rows["ingest floor: library CPU per event in the processor"]
    assert (floor.value, floor.ratio, floor.ceiling) == (96.0, 1.2, "faust target's budget 80 µs")
    e2e = rows["ingest floor: SDK + processor library CPU per event"]
    assert (e2e.value, e2e.ratio, e2e.ceiling) == (75.0, 1.5, "aiokafka target's budget 50 µs")
    recall = rows["summary fidelity: fact recall after roll-up x10, ours vs masking"]
    assert (recall.value, recall.ratio) == (0.6, 2.0)


def test_missing_benchmarks_and_keys_print_na() -> None:
    rows = by_measure(build({"run": {"ingest": {"producer_ceiling_events_per_s": 1}}}))
    assert rows["compaction throughput, 1 worker process"].value is None
    assert rows["no-op faust agent (the framework alone)"].ratio is None
    table = markdown(list(rows.values()))
    assert "| compaction throughput, 1 worker process | n/a |" in table
    assert (
        "| cold prepare p99, 100,000 records, no summary, from its stored state | n/a"
        " | ≤ 1,000 ms | n/a |" in table
    )


def test_markdown_has_one_line_per_row_under_the_header() -> None:
    rows = build(FIXTURE)
    lines = markdown(rows).splitlines()
    assert lines[0] == "| measure | value | ceiling or target | ratio |"
    assert len(lines) == len(rows) + 2
    assert (
        "| ingest end to end, faust driver | 2,000 ev/s |"
        in lines[[r.measure for r in rows].index("ingest end to end, faust driver") + 2]
    )


def test_load_tolerates_missing_and_malformed_files(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text("{not json")
    (tmp_path / "analytics.json").write_text(json.dumps([1, 2]))
    (tmp_path / "compaction_throughput.json").write_text(json.dumps(FIXTURE["throughput"]))
    data = load(tmp_path)
    assert data["run"] == {} and data["analytics"] == {} and data["long_session"] == {}
    rows = by_measure(build(data))
    assert rows["compaction throughput, 1 worker process"].value == 10.0
