"""domain.window.model_catalog: the profile each purpose is budgeted on (R6.1, R17) and the
publish check of the references a policy makes."""

from __future__ import annotations

from typing import Any

import pytest

from domain.policy.context_policy import ContextPolicy, effective_policy
from domain.window.budget import ModelProfile
from domain.window.model_catalog import ModelCatalog, check_refs, for_purpose
from schemas.errors import InvalidPolicy

OWN = ModelProfile("own", 4000, 500, 100)
SMALL = ModelProfile("small", 2500, 300, 50)
CATALOG = ModelCatalog({"small": SMALL}, {"cap-2k": 2000, "cap-10k": 10_000})


def _policy(overrides: dict[str, Any]) -> ContextPolicy:
    return effective_policy(overrides)[0]


def _pp(purpose: str, **values: Any) -> ContextPolicy:
    return _policy({"purpose_profiles": {purpose: values}})


def _budget(policy: ContextPolicy, purpose: str, default: ModelProfile = OWN) -> int:
    return for_purpose(policy, purpose, default, CATALOG.profiles, CATALOG.limits).input_budget()


@pytest.mark.spec("R6.1", "R17")
def test_without_overrides_every_purpose_is_budgeted_on_the_default() -> None:
    for purpose in ("action", "completion", "compaction", "child"):
        assert for_purpose(_policy({}), purpose, OWN, CATALOG.profiles, CATALOG.limits) == OWN


@pytest.mark.spec("R6.1", "R17")
def test_a_referenced_profile_budgets_only_its_purpose() -> None:
    policy = _pp("compaction", model_profile_ref="small")
    assert for_purpose(policy, "compaction", OWN, CATALOG.profiles) == SMALL
    assert _budget(policy, "compaction") == 2500 - 300 - 50
    assert _budget(policy, "action") == 4000 - 500 - 100


@pytest.mark.spec("R6.1", "R17")
def test_reserve_and_margin_override_the_profile_they_land_on() -> None:
    policy = _pp("child", output_reserve=1000, safety_margin=0)
    assert _budget(policy, "child") == 4000 - 1000
    both = _pp("compaction", model_profile_ref="small", output_reserve=100)
    assert _budget(both, "compaction") == 2500 - 100 - 50
    # A request's own profile replaces the default; the purpose's overrides still apply.
    request = ModelProfile("req", 8000, 800, 200)
    assert _budget(policy, "child", request) == 8000 - 1000 - 0


@pytest.mark.spec("R6.1", "R17")
def test_model_limit_ref_lowers_the_platform_limit_never_raises_it() -> None:
    assert _budget(_policy({"model_limit_ref": "cap-2k"}), "action") == 2000 - 500 - 100
    assert _budget(_policy({"model_limit_ref": "cap-10k"}), "action") == 4000 - 500 - 100
    limited = ModelProfile("lim", 4000, 500, 100, platform_limit=1500)
    capped = for_purpose(_policy({"model_limit_ref": "cap-2k"}), "action", limited, None, {})
    assert capped.platform_limit == 1500
    lowered = for_purpose(
        _policy({"model_limit_ref": "cap-2k"}), "action", limited, None, {"cap-2k": 1200}
    )
    assert lowered.platform_limit == 1200


def test_references_missing_from_the_maps_leave_the_default() -> None:
    policy = _policy(
        {"model_limit_ref": "gone", "purpose_profiles": {"action": {"model_profile_ref": "gone"}}}
    )
    assert for_purpose(policy, "action", OWN, CATALOG.profiles, CATALOG.limits) == OWN
    assert for_purpose(policy, "action", OWN) == OWN


@pytest.mark.spec("R7.7", "R17")
def test_check_refs_accepts_the_releases_own_profile_and_the_catalogs() -> None:
    check_refs(_pp("action", model_profile_ref="own"), "own", CATALOG)
    check_refs(_pp("action", model_profile_ref="small"), "own", CATALOG)
    check_refs(_policy({"model_limit_ref": "cap-2k"}), "own", CATALOG)


@pytest.mark.spec("R7.7", "R17")
@pytest.mark.parametrize(
    ("overrides", "rule", "path"),
    [
        (
            {"purpose_profiles": {"completion": {"model_profile_ref": "nowhere"}}},
            "unknown_model_profile",
            "purpose_profiles.completion.model_profile_ref",
        ),
        ({"model_limit_ref": "nowhere"}, "unknown_model_limit", "model_limit_ref"),
    ],
)
def test_check_refs_refuses_an_unknown_name(
    overrides: dict[str, Any], rule: str, path: str
) -> None:
    with pytest.raises(InvalidPolicy) as refused:
        check_refs(_policy(overrides), "own", CATALOG)
    assert refused.value.code == "invalid_policy"
    assert refused.value.details["rule"] == rule
    assert refused.value.details["path"] == path
