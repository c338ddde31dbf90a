"""Retention rules take effect through the real stack (issue 28, R10.1, R10.2, R10.5, R17):
the same conversation prepared under two releases that differ in one retention rule gives
two different prepared contexts."""

from __future__ import annotations

from typing import Any

import pytest

from services.sdk.client import ApiError, ContextClient, RunHandle
from tests.integration.test_compaction import round_
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration

# InputBudget 3,400.
SMALL = {"name": "ret-model", "context_capacity": 4000, "output_reserve": 500, "safety_margin": 100}


async def _conversation(c: ContextClient, retention: dict[str, str]) -> RunHandle:
    session = await new_session(
        c, model_profile=SMALL, context_policy={"retention_rules": retention}
    )
    run = await c.start_run(session)
    await c.append_user(run, "Which handlers exist?", "ret-q")
    await round_(c, run, "ret", result_tokens=60)
    return run


def _tool_blocks(prepared: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in prepared["messages"] if m["category"] == "tool_results"]


@pytest.mark.spec("R10.1", "R10.5", "R17")
async def test_making_tool_results_required_protects_and_counts_them(services: Services) -> None:
    async with client(services) as c:
        default = await c.prepare(await _conversation(c, {}))
        required = await c.prepare(await _conversation(c, {"tool_results": "required"}))
    (plain,), (kept,) = _tool_blocks(default), _tool_blocks(required)
    assert plain["retention"] == "compressible" and kept["retention"] == "required"
    protected = {p["block_id"] for p in required["protected_block_manifest"]}
    assert kept["block_id"] in protected
    assert plain["block_id"] not in {p["block_id"] for p in default["protected_block_manifest"]}
    assert required["budget"]["required"] == default["budget"]["required"] + kept["tokens"]


PASSAGE = {"citation_id": "big", "version": "1", "text": "fact " * 4000, "source": "kb"}


@pytest.mark.spec("R10.1", "R10.2", "R17")
async def test_optional_material_is_dropped_over_budget_required_material_is_a_precise_error(
    services: Services,
) -> None:
    async with client(services) as c:
        dropped = await c.prepare(await _conversation(c, {}), material=[PASSAGE])
        with pytest.raises(ApiError) as refused:
            await c.prepare(await _conversation(c, {"material": "required"}), material=[PASSAGE])
    assert not [m for m in dropped["messages"] if m["category"] == "material"]
    assert [d["reason"] for d in dropped["decisions"] if d["block_id"].startswith("cite:big")] == [
        "optional_over_budget"
    ]
    assert refused.value.code == "context_budget_exceeded"
    assert refused.value.details["reason"] == "required_over_budget"
    assert refused.value.details["required"] > refused.value.details["input_budget"]
