"""Releases are validated and frozen at publish; sessions keep their release (R1.4, R7.7)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

import pytest

from schemas.contracts import Authority, Content, RecordKind, UserInputPayload, Visibility
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
        assert (err.value.code, err.value.status) == ("release_conflict", 409)
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


def _release(release_id: str) -> dict[str, Any]:
    return {
        "release_id": release_id,
        "agent_id": "test-agent",
        "instructions": "You are a careful test agent.",
        "tool_catalog": [{"name": "read_file", "description": "Read a file", "parameters": {}}],
        "skill_bindings": [{"name": "review", "version": "r1"}],
        "hook_bindings": [{"point": "context.prepare.after", "hook": "audit:make", "version": "1"}],
        "model_profile": PROFILE,
        "context_policy": {"compaction": {"user_turns": 3}},
    }


@pytest.mark.spec("R1.4", "R17")
@pytest.mark.parametrize(
    "field,other",
    [
        ("tool_catalog", [{"name": "write_file", "description": "Write", "parameters": {}}]),
        ("skill_bindings", [{"name": "review", "version": "r2"}]),
        (
            "hook_bindings",
            [{"point": "context.prepare.after", "hook": "audit:make", "version": "2"}],
        ),
        ("hook_bindings", []),
        ("instructions", "You are a reckless test agent."),
        ("model_profile", PROFILE | {"output_reserve": 2000}),
        ("context_policy", {"compaction": {"user_turns": 4}}),
        ("agent_id", "another-agent"),
    ],
)
async def test_a_release_id_republished_with_any_other_content_is_refused(
    services: Services, field: str, other: Any
) -> None:
    body = _release(f"rel-{uuid.uuid4().hex[:8]}")
    async with client(services) as c:
        first = await c.register_release(**body)
        with pytest.raises(ApiError) as err:
            await c.register_release(**(body | {field: other}))
        stored = await c._call("GET", f"/v1/releases/{body['release_id']}")
    assert (err.value.code, err.value.status) == ("release_conflict", 409)
    assert err.value.details["fields"] == [field]
    assert stored["content_hash"] == first["content_hash"]  # the first content stays
    if field == "context_policy":  # stored with every default made explicit
        assert stored[field]["compaction"]["user_turns"] == 3
    else:
        assert stored[field] == body[field]


@pytest.mark.spec("R1.4", "R17")
async def test_republishing_identical_content_is_idempotent(services: Services) -> None:
    body = _release(f"rel-{uuid.uuid4().hex[:8]}")
    async with client(services) as c:
        first = await c.register_release(**body)
        # Same content, keys in another order and policy defaults spelled out: one release.
        again = await c.register_release(
            **dict(reversed(list(body.items())))
            | {"context_policy": {"compaction": {"user_turns": 3, "context_ratio": 0.8}}}
        )
        r = await c.http.request(
            "POST",
            "/v1/releases",
            body=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
        )
    assert again == first
    assert (r.status, json.loads(r.body)) == (201, first)
    assert first["release_id"] == body["release_id"] and len(first["content_hash"]) == 64


@pytest.mark.spec("R15.4", "R13.2", "R3.3")
async def test_an_unscoped_read_does_not_reach_an_instance_private_record(
    services: Services,
) -> None:
    async with client(services) as c:
        session = await new_session(c)
        sid, owner = session["session_id"], session["actor_id"]
        run = await c.start_run(session)
        ids = {}
        for key, visibility in (
            ("shared-1", Visibility.SESSION),
            ("private-1", Visibility.PRIVATE),
            ("instance-1", Visibility.INSTANCE),
        ):
            ev = c._event(
                run,
                RecordKind.USER_INPUT,
                Authority.USER,
                Content.text(f"{key} note"),
                UserInputPayload(),
                key,
            )
            await c.append(dataclasses.replace(ev, visibility=visibility))
        await c.prepare(run)  # committed
        for key in ("shared-1", "private-1", "instance-1"):
            ids[key] = (await c._call("GET", f"/v1/sessions/{sid}/events/{key}"))["record_id"]
        # Its own thread reads it; a session-visible record stays readable unscoped.
        assert (await c.read_record(sid, ids["private-1"], as_thread=run))["content"] == (
            "private-1 note"
        )
        assert (await c.read_record(sid, ids["shared-1"]))["content"] == "shared-1 note"
        refused = []
        for key in ("private-1", "instance-1"):
            for actor in (None, owner, "mallory"):
                with pytest.raises(ApiError) as err:
                    await c.read_record(sid, ids[key], actor=actor)
                refused.append((err.value.code, err.value.status))
            child = await c.export_for_child(run, f"child-{key}", [ids["shared-1"]])
            with pytest.raises(ApiError) as err:
                await c.read_record(sid, ids[key], as_thread=child)  # another thread
            refused.append((err.value.code, err.value.status))
    assert refused == [("not_granted", 403)] * 8
