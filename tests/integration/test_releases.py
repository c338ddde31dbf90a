"""Releases are validated and frozen at publish; sessions keep their release (R1.4, R7.7)."""

from __future__ import annotations

import pytest

from services.sdk.client import ApiError
from tests.support.flows import PROFILE, client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration


@pytest.mark.spec("R7.7")
async def test_invalid_config_fails_publishing(services: Services) -> None:
    async with client(services) as c:
        with pytest.raises(ApiError) as err:
            await c.register_release(
                agent_id="a",
                instructions="x",
                model_profile=PROFILE,
                context_policy={"compaction": {"context_ratio": 0.5, "target_context_ratio": 0.7}},
            )
        assert err.value.code == "invalid_policy"
        assert err.value.status == 422
        assert err.value.details["rule"] == "target_not_below_trigger"
        with pytest.raises(ApiError) as no_cap:
            await c.register_release(
                agent_id="a", instructions="x", model_profile={"name": "m", "output_reserve": 1}
            )
        assert no_cap.value.code == "invalid_policy"  # R6.5: unknown capacity


@pytest.mark.spec("R1.4", "R7.7", "R17")
async def test_a_new_release_leaves_existing_sessions_on_their_policy(services: Services) -> None:
    async with client(services) as c:
        session = await new_session(
            c, release_id="rel-frozen-1", context_policy={"compaction": {"user_turns": 3}}
        )
        run = await c.start_run(session)
        await c.append_user(run, "q", "q1")
        before = await c.prepare(run)
        # A changed policy is a new release; republishing the same id with other content
        # is refused, never applied to sessions in flight.
        with pytest.raises(ApiError) as err:
            await c.register_release(
                agent_id="test-agent",
                release_id="rel-frozen-1",
                instructions="You are a careful test agent.",
                model_profile=PROFILE,
                context_policy={"compaction": {"user_turns": 9}},
            )
        assert err.value.code == "conflict"
        newer = await c.register_release(
            agent_id="test-agent",
            instructions="changed",
            model_profile=PROFILE,
            context_policy={"compaction": {"user_turns": 9}},
        )
        after = await c.prepare(run)
    assert newer["policy_revision"] != before["dependency_versions"]["policy_revision"]
    assert after["dependency_versions"] == before["dependency_versions"]
    assert after["messages"][0]["content"].startswith("You are a careful test agent.")
