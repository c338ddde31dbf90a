"""``benchmarks.summary`` reads ``benchmarks.agents`` (issue 37): per K, steps/s, prepare
p99, CPU per step and errors beside the issue's targets; "n/a" when it did not run."""

from __future__ import annotations

from benchmarks.summary import build, markdown

DATA = {
    "agents": {
        "levels": [
            {"agents": 4, "steps_per_s": 20.0, "prepare_p99_ms": 60.0, "errors": 0,
             "cpu_ms_per_step": {"ours": 40.0, "machine": 90.0}},
            {"agents": 48, "steps_per_s": 36.0, "prepare_p99_ms": 1000.0, "errors": 2,
             "cpu_ms_per_step": {"ours": 50.0}},
        ]
    }
}  # fmt: skip


def test_agents_rows_against_the_targets() -> None:
    rows = {r.measure: r for r in build(DATA)}
    assert rows["48 agents: agent steps/s"].ratio == 0.2  # 36 of the 180 asked
    assert rows["4 agents: agent steps/s"].ratio is None  # no target at 4
    assert rows["4 agents: prepare p99 (the agent's wait)"].ratio == 2.0  # 60 vs 30 ms
    assert rows["48 agents: prepare p99 (the agent's wait)"].ratio == 10.0
    assert rows["4 agents: CPU per agent step, our processes"].ratio == 4.0
    assert rows["48 agents: errors"].value == 2


def test_agents_not_run_gives_na() -> None:
    table = markdown(build({}))
    assert "| 48 agents: agent steps/s | n/a | ≥ 180 | n/a |" in table


def test_a_paced_level_is_named_by_its_model_time_and_held_to_the_p99_target_only() -> None:
    paced = {"agents": 48, "model_ms": 500.0, "steps_per_s": 85.0, "prepare_p99_ms": 77.0,
             "errors": 0, "cpu_ms_per_step": {"ours": 18.0}}  # fmt: skip
    rows = {r.measure: r for r in build({"agents": {"levels": [*DATA["agents"]["levels"], paced]}})}
    steps = rows["48 agents, model 500 ms a call: agent steps/s"]
    assert steps.value == 85.0 and steps.ratio is None and steps.ceiling == ""
    assert rows["48 agents, model 500 ms a call: prepare p99 (the agent's wait)"].ratio == 0.77
    assert rows["48 agents, model 500 ms a call: CPU per agent step, our processes"].ratio is None
    assert rows["48 agents: agent steps/s"].ratio == 0.2  # the saturated level keeps it
