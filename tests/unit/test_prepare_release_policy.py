"""Release publishing and the whole ContextPolicy (issue 14, R17) on fakes: a release
frozen before the policy was complete is republished without a conflict, hook ids are
checked against the hooks this deployment loads, the overrides are kept as given."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from domain.auth import KeyKind
from domain.policy.context_policy import validate_policy
from schemas.errors import InvalidPolicy, ReleaseConflict
from services.prepare.assembly.prepare_hooks import HookRegistry
from services.prepare.bodies import ReleaseIn
from services.prepare.bootstrap import Options
from services.prepare.publishing import policy_revision, release_content_hash
from storage.releases import Release
from tests.unit.fakes.prepare import PROFILE, PrepareWorld


def release(**changes: object) -> ReleaseIn:
    body = {"release_id": "rel_a", "agent_id": "agent", "instructions": "Be brief."}
    return ReleaseIn.model_validate(body | {"model_profile": PROFILE} | changes)


def four_sections() -> dict[str, Any]:
    """The policy as releases stored it before R17 was complete (to_dict of then)."""
    full = validate_policy({}).to_dict()
    return {
        "api_version": full["api_version"],
        "recent_complete_groups": full["recent_complete_groups"],
        "compaction": full["compaction"],
        "large_result": full["large_result_policy"],
    }


def stored_before_r17(w: PrepareWorld, body: ReleaseIn, content_hash: bool = True) -> Release:
    """``body`` as it was frozen when the policy had four sections."""
    content = {
        "agent_id": body.agent_id,
        "instructions": body.instructions,
        "tool_catalog": body.tool_catalog,
        "skill_bindings": body.skill_bindings,
        "hook_bindings": body.hook_bindings,
        "model_profile": body.model_profile,
        "context_policy": four_sections(),
    }
    rel = Release(
        release_id=body.release_id or "",
        **content,
        policy_revision=policy_revision(
            {"policy": content["context_policy"], "model_profile": body.model_profile}
        ),
        content_hash=release_content_hash(content) if content_hash else None,
        space_id="space",
        frozen_at=datetime.now(UTC).isoformat(),
        policy=validate_policy(content["context_policy"]),
    )
    w.releases.rows[rel.release_id] = rel
    return rel


@pytest.mark.spec("R1.4", "R17")
@pytest.mark.parametrize("hashed", [True, False], ids=["hashed", "before-migration-006"])
async def test_a_release_frozen_with_four_policy_sections_republished_alike_is_the_same(
    hashed: bool,
) -> None:
    w = PrepareWorld()
    old = stored_before_r17(w, release(), content_hash=hashed)
    again = await w.svc.releases.register(release(), "space")
    assert again.policy_revision == old.policy_revision  # the sessions' one, unchanged
    assert w.releases.rows["rel_a"].context_policy == four_sections()
    with pytest.raises(ReleaseConflict) as exc:
        await w.svc.releases.register(
            release(context_policy={"recent_complete_groups": 5}), "space"
        )
    assert exc.value.details["fields"] == ["context_policy"]


@pytest.mark.spec("R17", "R14")
async def test_a_policy_binding_a_hook_this_deployment_does_not_load_is_refused() -> None:
    class Marker:
        name, version = "marker", "3"

        async def model_before(self, call: object, messages: list[object]) -> list[object]:
            return messages

    w = PrepareWorld(hooks=HookRegistry((Marker(),)), known_hooks=("tag-and-keep@7",))
    bind = [
        {"point": "model.chat.before", "hook": "marker", "version": "3"},
        {"point": "context.compact.after", "hook": "tag-and-keep"},
    ]
    await w.svc.releases.register(release(context_policy={"hook_bindings": bind}), "space")
    assert [b.hook for b in w.releases.rows["rel_a"].policy.hook_bindings] == [
        "marker",
        "tag-and-keep",
    ]
    unknown = [*bind, {"point": "model.chat.after", "hook": "marker", "version": "4"}]
    with pytest.raises(InvalidPolicy) as exc:
        await w.svc.releases.register(
            release(release_id="rel_b", context_policy={"hook_bindings": unknown}), "space"
        )
    details = exc.value.details
    assert (details["path"], details["rule"], details["hook"]) == (
        "hook_bindings[2].hook",
        "unknown_hook",
        "marker@4",
    )
    assert "rel_b" not in w.releases.rows
    # A deployment that loads no hooks refuses every binding.
    bare = PrepareWorld(options=Options())
    with pytest.raises(InvalidPolicy):
        await bare.svc.releases.register(release(context_policy={"hook_bindings": bind[:1]}))


@pytest.mark.spec("R17")
async def test_a_release_keeps_the_overrides_as_given_beside_the_effective_policy() -> None:
    w = PrepareWorld()
    overrides = {"compaction": {"user_turns": 3}, "large_result": {"preview_chars": 300}}
    await w.svc.releases.register(release(context_policy=overrides), "space")
    key = w.keys.issue("space", KeyKind.HOST)
    shown = await w.svc.access.authorized_release(
        "rel_a", await w.svc.access.authenticate(key, None)
    )
    assert shown.policy_overrides == overrides
    assert shown.context_policy["compaction"]["user_turns"] == 3
    assert shown.context_policy["large_result_policy"]["preview_chars"] == 300
    assert shown.context_policy["compaction"]["context_ratio"] == 0.8  # the default
    # The same effective policy spelled otherwise is the same release: the first
    # publish's overrides stay.
    spelled = overrides | {"large_result_policy": {"preview_chars": 300}}
    del spelled["large_result"]
    await w.svc.releases.register(release(context_policy=spelled), "space")
    assert w.releases.rows["rel_a"].policy_overrides == overrides


@pytest.mark.spec("R14", "R17")
async def test_a_hook_bound_at_a_point_it_does_not_serve_is_refused_at_publish() -> None:
    """A prepare would fail on it (hook_not_loaded) every time: refused with its path."""

    class Marker:
        name, version = "marker", "3"

        async def model_before(self, call: object, messages: list[object]) -> list[object]:
            return messages

    w = PrepareWorld(hooks=HookRegistry((Marker(),)), known_hooks=("tag-and-keep@7",))
    for i, wrong in enumerate(
        [
            {"point": "context.prepare.before", "hook": "marker", "version": "3"},  # no method
            {"point": "model.chat.before", "hook": "tag-and-keep"},  # a compaction hook
            {"point": "context.compact.before", "hook": "marker"},  # a Prepare hook
        ]
    ):
        with pytest.raises(InvalidPolicy) as exc:
            policy = {"hook_bindings": [wrong]}
            await w.svc.releases.register(
                release(release_id=f"rel_w{i}", context_policy=policy), "space"
            )
        assert exc.value.details["rule"] == "unknown_hook"
        assert exc.value.details["path"] == "hook_bindings[0].hook"
