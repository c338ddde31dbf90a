"""What publishes can be prepared for (issue 25, finding 10): publish-time validation is
the prepare path's own typed model (services/prepare/release_spec.py), so a release that
publishes never makes a prepare fail — and what a prepare could not use is refused at
publish with a code and the JSON path of the offending field. Real stack."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings

from services.sdk.client import ApiError, ContextClient
from tests.support.flows import PROFILE, client
from tests.support.releases import releases
from tests.support.services import TEST_SPACE, Services

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

BASE = {"agent_id": "contract-agent", "instructions": "Be brief.", "model_profile": PROFILE}


async def _refusal(c: ContextClient, **release: Any) -> ApiError:
    with pytest.raises(ApiError) as err:
        await c.register_release(**(BASE | release))
    return err.value


@pytest.mark.spec("R7.7", "R12.1", "R16", "R17")
async def test_the_two_shapes_of_the_finding_are_refused_at_publish_with_their_path(
    services: Services,
) -> None:
    async with client(services) as c:
        skills = await _refusal(c, skill_bindings=[{"skill_id": "review", "revision": "r1"}])
        tools = await _refusal(
            c, tool_catalog=[{"name": "read_file"}, {"description": "no name", "parameters": {}}]
        )
        twice = await _refusal(c, tool_catalog=[{"name": "a"}, {"name": "a"}])
        fmt = await _refusal(c, model_profile=PROFILE | {"provider_format": "telegraph"})
    assert (skills.status, skills.code) == (422, "invalid_request")
    assert skills.details["json_path"] == "skill_bindings[0].name"
    assert {e["json_path"] for e in skills.details["errors"]} == {
        "skill_bindings[0].name",
        "skill_bindings[0].version",
        "skill_bindings[0].skill_id",
        "skill_bindings[0].revision",
    }
    assert (tools.status, tools.code, tools.details["json_path"]) == (
        422,
        "invalid_request",
        "tool_catalog[1].name",
    )
    assert twice.details["json_path"] == "tool_catalog" and "[1].name" in twice.message + str(
        twice.details["errors"]
    )
    assert (fmt.status, fmt.code, fmt.details["json_path"]) == (
        422,
        "invalid_policy",
        "model_profile.provider_format",
    )


@pytest.mark.spec("R12.1", "R16", "R17")
async def test_a_release_with_skills_and_tools_in_their_shape_prepares(
    services: Services,
) -> None:
    async with client(services) as c:
        rel = await c.register_release(
            **BASE,
            tool_catalog=[{"name": "read_file", "description": "Read", "strict": True}],
            skill_bindings=[{"name": "review", "version": "r1", "description": "Review"}],
        )
        session = await c.open_session(TEST_SPACE, "contract-actor", rel["release_id"])
        run = await c.start_run(session)
        await c.append_user(run, "Review it.", f"q-{uuid.uuid4().hex[:6]}")
        out = await c.prepare(run, render=True)
        shown = await c._call("GET", f"/v1/releases/{rel['release_id']}")
    assert [t["name"] for t in out["tools"]] == ["read_file"]
    assert out["tools"][0] == {"name": "read_file", "description": "Read", "strict": True}
    assert any("- review (vr1): Review" in m["content"] for m in out["messages"])
    # Stored as given: no default spelled out, so republishing the same body is the same.
    assert shown["skill_bindings"] == [{"name": "review", "version": "r1", "description": "Review"}]


# --- any release that publishes can be prepared for ---------------------------------------


async def _publish_then_prepare(c: ContextClient, release: dict[str, Any]) -> None:
    try:
        rel = await c.register_release(**release)
    except ApiError as exc:
        # Refused at publish: always a 422 that names where (never a 5xx).
        assert exc.status == 422 and exc.code in ("invalid_request", "invalid_policy"), exc
        assert "json_path" in exc.details, exc.details
        event(f"refused at publish: {exc.code}")
        return
    event("published")
    session = await c.open_session(TEST_SPACE, "contract-fuzz", rel["release_id"])
    run = await c.start_run(session)
    await c.append_user(run, "Go on.", f"q-{uuid.uuid4().hex[:8]}")
    try:
        prepared = await c.prepare(run, render=True)
        await c.check_model_call(run, prepared)
    except ApiError as exc:
        # The only refusal a published release may meet: its own tools and instructions
        # over its budget (R6.3) — a 422 with the sizes, not a 500.
        assert exc.status < 500 and exc.code == "context_budget_exceeded", (release, exc)


@pytest.mark.spec("R7.7", "R16", "R17")
def test_any_release_that_publishes_can_be_prepared_for(services: Services) -> None:
    loop = asyncio.new_event_loop()
    cm = client(services)
    c = loop.run_until_complete(cm.__aenter__())
    try:

        @settings(
            max_examples=60,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @given(release=releases())
        def one(release: dict[str, Any]) -> None:
            loop.run_until_complete(_publish_then_prepare(c, release))

        one()
    finally:
        loop.run_until_complete(cm.__aexit__(None, None, None))
        loop.close()
