"""``benchmarks.agents --model-ms``: each agent waits its model's time after every
prepare before it appends the model's result, so K agents offer a load below what
saturates the machine (docs/scaling.md, "Agents that wait for a model")."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from benchmarks.agents import Agent, Stats


class _Client:
    """The calls ``Agent.question`` makes, answered at once; the order kept."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def _note(self, name: str) -> None:
        self.calls.append((name, time.monotonic()))

    async def start_run(self, session: Any, run_id: str) -> dict[str, str]:
        self._note("start")
        return {"run_id": run_id}

    async def append_user(self, *_: Any) -> None:
        self._note("user")

    async def prepare(self, run: Any) -> dict[str, Any]:
        self._note("prepare")
        return {"timing": {"assemble_ms": 1.0, "commit_wait_ms": 0.5}}

    async def append_model_result(self, *_: Any) -> None:
        self._note("model_result")

    async def append_tool_outcome(self, *_: Any) -> None:
        self._note("tool_outcome")

    async def finish_run(self, *_: Any, **__: Any) -> None:
        self._note("finish")


def _question(model_ms: float) -> list[tuple[str, float]]:
    client = _Client()
    agent = Agent(client, "a", Stats(), seed=1, model_ms=model_ms)  # type: ignore[arg-type]
    asyncio.run(agent.question({}, 0))
    return client.calls


def _gaps_after_prepares(calls: list[tuple[str, float]]) -> list[float]:
    return [b[1] - a[1] for a, b in itertools.pairwise(calls) if a[0] == "prepare"]


def test_each_prepare_is_followed_by_the_models_time() -> None:
    calls = _question(400.0)
    assert [c[0] for c in calls] == [
        "start", "user", "prepare", "model_result", "tool_outcome", "prepare",
        "model_result", "finish",
    ]  # fmt: skip
    gaps = _gaps_after_prepares(calls)
    assert len(gaps) == 2
    assert all(0.2 <= g < 2.0 for g in gaps), gaps  # 0.5-1.5 x 400 ms, and a loaded host


def test_without_a_model_time_the_agent_goes_on_at_once() -> None:
    assert all(g < 0.1 for g in _gaps_after_prepares(_question(0.0)))
