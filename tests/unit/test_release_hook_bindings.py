"""Prepare-side hooks run as the call's release binds them (issue 28, R14, R17, R1.4):
on fakes through the real composition root, one loaded hook with all four Prepare points,
two releases — one binding it, one not."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from schemas.errors import HookFailed
from services.prepare.assembly.prepare_hooks import (
    HookCall,
    HookRegistry,
    PrepareAdjust,
    PrepareRequest,
)
from services.prepare.bodies import ModelCallIn, ModelResultIn, PrepareIn, ReleaseIn, SessionIn
from tests.unit.fakes.prepare import PROFILE, PrepareWorld

POINTS = ("context.prepare.before", "context.prepare.after", "model.chat.before")
POINTS += ("model.chat.after",)


class Spy:
    """Adds a passage and a message; records every point it was called at."""

    name, version, timeout_s = "spy", "2", 2.0

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def prepare_before(self, req: PrepareRequest) -> PrepareAdjust:
        self.seen.append(("context.prepare.before", req.session_id))
        return PrepareAdjust(add_material=({"citation_id": "spy", "text": "Spy passage."},))

    async def prepare_after(self, prepared: Mapping[str, Any]) -> None:
        self.seen.append(("context.prepare.after", ""))

    async def model_before(self, call: HookCall, messages: list[Any]) -> list[Any]:
        self.seen.append(("model.chat.before", call.session_id))
        return [*messages, {"role": "user", "content": "spy note"}]

    async def model_after(self, call: HookCall, response: Mapping[str, Any]) -> None:
        self.seen.append(("model.chat.after", call.session_id))


async def _world(spy: Spy, bindings: dict[str, list[dict[str, Any]]]) -> PrepareWorld:
    w = PrepareWorld(hooks=HookRegistry((spy,)))
    for sid, bind in bindings.items():
        await _release(w, sid, bind)
    return w


async def _release(w: PrepareWorld, sid: str, bind: list[dict[str, Any]]) -> None:
    body = {
        "release_id": f"rel_{sid}",
        "agent_id": "a",
        "instructions": "Answer.",
        "model_profile": PROFILE,
        "context_policy": {"hook_bindings": bind},
    }
    await w.svc.releases.register(ReleaseIn.model_validate(body), "space")
    await w.svc.runs.open_session(SessionIn(session_id=sid, release_id=f"rel_{sid}"), "space", "al")
    w.run(sid, "r1")
    w.say(sid, "r1", "user_input", "What changed?")


async def _call(w: PrepareWorld, sid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    prepared = await w.svc.preparer.prepare(sid, "r1", PrepareIn(purpose="action"))
    call = await w.svc.gateway.model_call(sid, "r1", ModelCallIn(prepared_id=prepared.prepared_id))
    await w.svc.gateway.model_result(sid, call.call_id, ModelResultIn(usage={"input_tokens": 50}))
    return prepared, call


@pytest.mark.spec("R14", "R17", "R1.4")
async def test_only_the_release_that_binds_the_hook_has_it_run_at_each_point() -> None:
    spy = Spy()
    bound = [{"point": p, "hook": "spy", "version": "2"} for p in POINTS]
    w = await _world(spy, {"a": bound, "b": []})
    prep_a, call_a = await _call(w, "a")
    prep_b, call_b = await _call(w, "b")
    assert [p for p, _ in spy.seen] == list(POINTS)  # A's four points, B's none
    assert {s for _, s in spy.seen} <= {"a", ""}
    assert [m["origins"] for m in prep_a.messages if m["block"] == "material"] == [["hook:spy@2"]]
    assert not [m for m in prep_b.messages if m["block"] == "material"]
    assert call_a.hook_versions == ["spy@2"] and call_b.hook_versions == []
    assert "spy note" in str(call_a.request) and "spy note" not in str(call_b.request)


@pytest.mark.spec("R14", "R17")
async def test_a_release_binding_one_point_runs_the_hook_at_that_point_only() -> None:
    spy = Spy()
    w = await _world(spy, {"a": [{"point": "model.chat.before", "hook": "spy"}]})
    prepared, call = await _call(w, "a")
    assert spy.seen == [("model.chat.before", "a")]
    assert call.hook_versions == ["spy@2"]  # unversioned: the loaded version
    assert not [m for m in prepared.messages if m["block"] == "material"]


@pytest.mark.spec("R14", "R17")
async def test_a_binding_no_loaded_hook_answers_fails_the_prepare_clearly() -> None:
    spy = Spy()
    # Published while the deployment loaded spy@3 (publish checks ids); now it loads spy@2.
    w = await _world(spy, {})
    w.svc.releases.known_hooks = ("spy@2", "spy@3")
    await _release(w, "a", [{"point": "model.chat.after", "hook": "spy", "version": "3"}])
    with pytest.raises(HookFailed) as err:
        await w.svc.preparer.prepare("a", "r1", PrepareIn(purpose="action"))
    assert err.value.details["reason"] == "hook_not_loaded"
    assert err.value.details["hook"] == "spy@3"
    assert err.value.details["point"] == "model.chat.after"
    assert err.value.details["loaded"] == ["spy@2"]
    assert "does not load" in err.value.message and spy.seen == []
