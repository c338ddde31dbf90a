"""``compaction.rollup`` (R11.8): how a summary over its bound is condensed — by the
summarizer, or fitted without a call — and what it costs (issue 39)."""

from __future__ import annotations

import pytest

from domain.policy.context_policy import ROLLUPS, effective_policy
from schemas.errors import InvalidPolicy


@pytest.mark.spec("R11.8", "R17")
def test_auto_asks_the_built_in_summarizer_and_fits_for_a_billed_one() -> None:
    auto = effective_policy({})[0].compaction
    assert auto.rollup == "auto"
    assert auto.rolls_up_by(billed_summarizer=False) == "summarizer"
    assert auto.rolls_up_by(billed_summarizer=True) == "fit"
    for chosen in ("summarizer", "fit"):
        c = effective_policy({"compaction": {"rollup": chosen}})[0].compaction
        assert {c.rolls_up_by(b) for b in (False, True)} == {chosen}


@pytest.mark.spec("R7.7")
def test_another_rollup_is_refused_at_publish_with_its_path_and_options() -> None:
    with pytest.raises(InvalidPolicy) as err:
        effective_policy({"compaction": {"rollup": "model"}})
    assert err.value.details["path"] == "compaction.rollup"
    assert err.value.details["rule"] == "not_an_option"
    assert err.value.details["options"] == sorted(ROLLUPS)


@pytest.mark.spec("R9.4", "R18")
def test_without_roll_up_calls_a_forked_model_summarizer_costs_less_than_the_reference() -> None:
    from benchmarks.cost import measure

    r = measure()
    for cache in ("anthropic 5m", "anthropic 1h", "openai 5m", "openai 24h"):
        rows = r["real_rules"][cache]
        fitted = rows["ours, model summarizer"]["cost_per_question_usd"]
        rolled = rows["ours, model roll-ups"]["cost_per_question_usd"]
        assert fitted < rows["langchain"]["cost_per_question_usd"] < rolled
        assert r["verdict"]["real_rules_model_summarizer_below_langchain"][cache]
    # The forked calls are the jobs' bill: a model summarizer's compactions are not free.
    assert r["policies"]["ours, model summarizer"]["compaction_cost_usd"] > 0
    assert r["policies"]["ours"]["compaction_cost_usd"] == 0
    # Every user back within the cache's lifetime: the marks keep 90% under every rule.
    assert all(v >= 0.9 for v in r["warm_steady_cacheable_share"].values())


@pytest.mark.spec("R17", "R11.8")
def test_a_release_frozen_before_the_field_keeps_rolling_up_by_its_summarizer() -> None:
    from domain.policy.parsed import policy_of

    frozen = effective_policy({})[0].to_dict()
    del frozen["compaction"]["rollup"]  # a defaults-v1 release's stored policy
    old = policy_of("rev-frozen-v1", frozen).compaction
    assert old.rollup == "summarizer" and old.rolls_up_by(billed_summarizer=True) == "summarizer"
    # A policy frozen with the field keeps what it says.
    assert policy_of("rev-v2", effective_policy({})[0].to_dict()).compaction.rollup == "auto"
