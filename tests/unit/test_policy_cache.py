"""A release's policy is parsed once per policy revision (releases are frozen, R17): the
processor's checks, the compaction service's jobs and release loads share the parse."""

from __future__ import annotations

import json

import pytest

from domain.policy import parsed as policies
from domain.policy.context_policy import validate_policy


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    policies._parsed.clear()


def test_a_revision_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []

    def counting(raw: object) -> object:
        calls.append(raw)
        return validate_policy(raw)  # type: ignore[arg-type]

    monkeypatch.setattr(policies, "validate_policy", counting)
    raw = {"compaction": {"context_ratio": 0.9}}
    first = policies.policy_of("pol_a", raw)
    again = policies.policy_of("pol_a", json.dumps(raw))
    assert again is first and len(calls) == 1
    assert first.compaction.context_ratio == 0.9
    other = policies.policy_of("pol_b", {"compaction": {"context_ratio": 0.85}})
    assert other.compaction.context_ratio == 0.85 and len(calls) == 2


@pytest.mark.spec("R17")
def test_the_cache_is_bounded_and_keeps_the_recently_used() -> None:
    for i in range(policies.MAX_CACHED + 10):
        policies.policy_of(f"pol_{i}", {})
        policies.policy_of("pol_hot", {"compaction": {"context_ratio": 0.95}})
    assert len(policies._parsed) == policies.MAX_CACHED
    assert "pol_0" not in policies._parsed and "pol_hot" in policies._parsed


def test_a_stored_policy_as_text_is_parsed_like_the_object() -> None:
    raw = {"recent_complete_groups": 3}
    assert policies.policy_of("pol_t", json.dumps(raw)) == validate_policy(raw)
