"""Purpose profiles and the model catalog take effect through the real stack (R6.1, R17):
a purpose's referenced profile, its output reserve and safety margin, whether it is offered
tools, and the policy's platform limit change what Prepare budgets and offers; references
the deployment's catalog does not hold are refused at publish. The test services load the
catalog from tests/support/model_profiles.json and ALC_MODEL_LIMITS=test-cap-2k=2000."""

from __future__ import annotations

from typing import Any

import pytest

from services.sdk.client import ApiError, ContextClient
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration

# InputBudget 4000 - 500 - 100 = 3,400.
OWN = {"name": "pp-model", "context_capacity": 4000, "output_reserve": 500, "safety_margin": 100}


async def _prepare(c: ContextClient, policy: dict[str, Any], purpose: str) -> dict[str, Any]:
    """``child``: an action call of a child thread (R13.1), the ``child`` purpose profile."""
    session = await new_session(c, model_profile=OWN, context_policy=policy)
    run = await c.start_run(session)
    await c.append_user(run, "Which handlers exist?", f"pp-{purpose}")
    if purpose == "child":
        return await c.prepare(await c.export_for_child(run, "pp-child-1", []))
    return await c.prepare(run, purpose=purpose)


def _pp(purpose: str, **values: Any) -> dict[str, Any]:
    return {"purpose_profiles": {purpose: values}}


@pytest.mark.spec("R6.1", "R17")
async def test_a_purpose_is_budgeted_on_its_referenced_profile_reserve_and_margin(
    services: Services,
) -> None:
    async with client(services) as c:
        plain = await _prepare(c, {}, "compaction")
        small = await _prepare(
            c, _pp("compaction", model_profile_ref="small-compactor"), "compaction"
        )
        own = await _prepare(c, _pp("action", model_profile_ref="pp-model"), "action")
        reserve = await _prepare(c, _pp("action", output_reserve=1000, safety_margin=0), "action")
        action = await _prepare(c, _pp("compaction", model_profile_ref="small-compactor"), "action")
        child = await _prepare(c, _pp("child", output_reserve=700), "child")
    assert plain["budget"]["input_budget"] == 3400
    assert small["budget"]["input_budget"] == 2500 - 300 - 50  # the catalog's profile
    assert own["budget"]["input_budget"] == 3400  # the release's own profile by name
    assert reserve["budget"]["input_budget"] == 4000 - 1000 - 0
    assert action["budget"]["input_budget"] == 3400  # only the referencing purpose moves
    assert child["budget"]["input_budget"] == 4000 - 700 - 100


@pytest.mark.spec("R6.1", "R17")
async def test_model_limit_ref_caps_the_capacity_of_every_purpose(services: Services) -> None:
    async with client(services) as c:
        capped = await _prepare(c, {"model_limit_ref": "test-cap-2k"}, "action")
        completion = await _prepare(c, {"model_limit_ref": "test-cap-2k"}, "completion")
    assert capped["budget"]["input_budget"] == 2000 - 500 - 100
    assert completion["budget"]["input_budget"] == 2000 - 500 - 100


@pytest.mark.spec("R11.3", "R17")
@pytest.mark.parametrize("purpose", ["action", "completion", "child"])
async def test_a_purpose_without_tools_is_offered_none(services: Services, purpose: str) -> None:
    async with client(services) as c:
        offered = await _prepare(c, {}, purpose)
        none = await _prepare(c, _pp(purpose, tools_allowed=False), purpose)
    assert offered["tools"] and offered["budget"]["items"]["tool_schemas"] > 0
    assert none["tools"] == [] and none["budget"]["items"]["tool_schemas"] == 0


@pytest.mark.spec("R7.7", "R17")
@pytest.mark.parametrize(
    ("policy", "rule", "path"),
    [
        (
            {"purpose_profiles": {"child": {"model_profile_ref": "nowhere"}}},
            "unknown_model_profile",
            "purpose_profiles.child.model_profile_ref",
        ),
        ({"model_limit_ref": "nowhere"}, "unknown_model_limit", "model_limit_ref"),
    ],
)
async def test_a_reference_the_catalog_does_not_hold_is_refused_at_publish(
    services: Services, policy: dict[str, Any], rule: str, path: str
) -> None:
    async with client(services) as c:
        with pytest.raises(ApiError) as refused:
            await new_session(c, model_profile=OWN, context_policy=policy)
    assert refused.value.code == "invalid_policy"
    assert refused.value.details["rule"] == rule
    assert refused.value.details["path"] == path
    assert refused.value.details["json_path"] == f"context_policy.{path}"
