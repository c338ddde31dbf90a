"""R17: the deployment's model catalog is read from its settings (ALC_MODEL_PROFILES_FILE,
ALC_MODEL_LIMITS); what it holds is what publish accepts and Prepare budgets on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from domain.policy.context_policy import effective_policy
from domain.window.budget import ModelProfile
from domain.window.model_catalog import check_refs, for_purpose
from schemas.errors import InvalidPolicy
from services.model_profiles import load_catalog

OWN = ModelProfile("own", 8000, 1000, 200)


def _file(tmp_path: Path, body: object) -> str:
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps(body), "utf-8")
    return str(path)


@pytest.mark.spec("R6.1", "R17")
def test_the_settings_catalog_decides_what_a_policy_may_name_and_its_budget(
    tmp_path: Path,
) -> None:
    small = {"name": "small", "context_capacity": 3000, "output_reserve": 300, "safety_margin": 0}
    catalog = load_catalog(_file(tmp_path, {"small": small}), " cap=4000 , ", None)
    assert set(catalog.profiles) == {"small"} and dict(catalog.limits) == {"cap": 4000}
    policy = effective_policy(
        {
            "model_limit_ref": "cap",
            "purpose_profiles": {"compaction": {"model_profile_ref": "small"}},
        }
    )[0]
    check_refs(policy, "own", catalog)  # both names are the deployment's
    compaction = for_purpose(policy, "compaction", OWN, catalog.profiles, catalog.limits)
    action = for_purpose(policy, "action", OWN, catalog.profiles, catalog.limits)
    assert compaction.input_budget() == 3000 - 300
    assert action.input_budget() == 4000 - 1000 - 200
    with pytest.raises(InvalidPolicy) as refused:
        check_refs(policy, "own", load_catalog(None, "", None))  # an empty deployment
    assert refused.value.details["rule"] == "unknown_model_profile"


@pytest.mark.parametrize(
    ("profiles", "limits", "says"),
    [
        ({"bad": {"name": "bad"}}, "", "ALC_MODEL_PROFILES_FILE bad"),
        ([1, 2], "", "not a JSON object"),
        ({}, "cap=0", "ALC_MODEL_LIMITS entry 'cap=0'"),
        ({}, "cap", "ALC_MODEL_LIMITS entry 'cap'"),
        ({}, "=100", "ALC_MODEL_LIMITS entry '=100'"),
    ],
)
def test_a_malformed_catalog_stops_the_process_naming_the_entry(
    tmp_path: Path, profiles: object, limits: str, says: str
) -> None:
    with pytest.raises(SystemExit) as err:
        load_catalog(_file(tmp_path, profiles), limits, None)
    assert says in str(err.value)
    with pytest.raises(SystemExit):
        load_catalog(str(tmp_path / "missing.json"), "", None)
