"""Publish refuses what a prepare could not use (issue 25, finding 10) — on fakes: the
request model is the prepare path's own (services/prepare/release_spec.py), so any body
that publishes prepares and reaches the gateway; a release stored before the check that
holds an unusable part is refused with its path (422), never a 500 on every prepare."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from pydantic import ValidationError

from schemas.errors import ContextBudgetExceeded, InvalidPolicy
from services.prepare.bodies import ModelCallIn, PrepareIn, ReleaseIn, SessionIn
from services.prepare.fields import json_path
from tests.support.releases import releases
from tests.unit.fakes.prepare import PROFILE, PrepareWorld

BASE = {"agent_id": "a", "instructions": "Answer.", "model_profile": PROFILE}
_ids = itertools.count()


def paths(body: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as err:
        ReleaseIn.model_validate(BASE | body)
    return [json_path(e["loc"]) for e in err.value.errors()]


@pytest.mark.spec("R7.7", "R12.1", "R17")
def test_the_shapes_of_the_finding_are_refused_with_their_paths() -> None:
    assert paths({"skill_bindings": [{"skill_id": "review", "revision": "r1"}]}) == [
        "skill_bindings[0].name",
        "skill_bindings[0].version",
        "skill_bindings[0].skill_id",
        "skill_bindings[0].revision",
    ]
    assert paths({"tool_catalog": [{"name": "ok"}, {"description": "nameless"}]}) == [
        "tool_catalog[1].name"
    ]
    assert paths({"tool_catalog": [{"name": "two words"}]}) == ["tool_catalog[0].name"]
    assert paths({"tool_catalog": [{"name": "t"}, {"name": "t"}]}) == ["tool_catalog"]
    assert paths({"hook_bindings": [{"point": "nowhere", "hook": "h"}]}) == [
        "hook_bindings[0].point"
    ]


@pytest.mark.spec("R7.7", "R17")
async def test_a_model_profile_no_model_call_can_render_is_refused_at_publish() -> None:
    w = PrepareWorld()
    body = ReleaseIn.model_validate(BASE | {"model_profile": PROFILE | {"provider_format": "x"}})
    with pytest.raises(InvalidPolicy) as err:
        await w.svc.releases.register(body, "space")
    assert err.value.details["json_path"] == "model_profile.provider_format"
    with pytest.raises(InvalidPolicy) as policy:
        await w.svc.releases.register(
            ReleaseIn.model_validate(BASE | {"context_policy": {"compaction": {"user_turns": 0}}})
        )
    assert policy.value.details["path"] == "compaction.user_turns"  # as the settings page
    assert policy.value.details["json_path"] == "context_policy.compaction.user_turns"


@pytest.mark.spec("R7.7", "R16")
async def test_a_release_stored_before_the_check_is_refused_with_its_path_not_a_500() -> None:
    w = PrepareWorld()
    await w.svc.releases.register(ReleaseIn.model_validate(BASE | {"release_id": "rel"}), "space")
    bad = [{"skill_id": "review", "revision": "r1"}]
    w.releases.rows["rel"] = w.releases.rows["rel"].model_copy(update={"skill_bindings": bad})
    await w.sessions.insert("s1", "space", "alice", "rel")  # opened before the check
    w.run("s1", "r1")
    w.say("s1", "r1", "user_input", "Go.")
    with pytest.raises(InvalidPolicy) as err:
        await w.instance().svc.preparer.prepare("s1", "r1", PrepareIn())
    assert err.value.http_status == 422
    d = err.value.details
    assert (d["json_path"], d["rule"]) == ("skill_bindings[0].name", "stored_release_invalid")
    with pytest.raises(InvalidPolicy):  # no new session on it either
        await w.instance().svc.runs.open_session(SessionIn(release_id="rel"), "space", "bob")


async def _publish_then_prepare(release: dict[str, Any]) -> None:
    w = PrepareWorld()
    try:
        body = ReleaseIn.model_validate(release | {"release_id": f"rel{next(_ids)}"})
        await w.svc.releases.register(body, "space")
    except (ValidationError, InvalidPolicy) as exc:
        if isinstance(exc, InvalidPolicy):
            assert "json_path" in exc.details, exc.details
        event(f"refused at publish: {type(exc).__name__}")
        return
    event("published")
    sid = f"s{next(_ids)}"
    await w.svc.runs.open_session(
        SessionIn(session_id=sid, release_id=body.release_id), "space", "al"
    )
    w.run(sid, "r1")
    w.say(sid, "r1", "user_input", "Go on.")
    try:
        out = await w.svc.preparer.prepare(sid, "r1", PrepareIn(render=True))
        await w.svc.gateway.model_call(sid, "r1", ModelCallIn(prepared_id=out.prepared_id))
    except ContextBudgetExceeded:
        pass  # its own tools and instructions over its budget (R6.3): a 422, not a 500


@pytest.mark.spec("R7.7", "R16", "R17")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(release=releases(PROFILE))
def test_any_release_that_publishes_prepares_and_reaches_the_gateway(
    release: dict[str, Any],
) -> None:
    import asyncio

    asyncio.run(_publish_then_prepare(release))
