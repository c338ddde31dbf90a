"""A ratio-triggered compaction must pay for itself (issue 27, ``domain.compaction.gain``):
the exact boundary, the hard budget never blocked, the stable ``no_gain`` deferral; a
billed summarizer at its own profile's prices and a deferral that never spends the room
for the next step (issue 39 items 4 and 5)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from domain.compaction.control.effects import JobStart, LockedState, ObservationInputs
from domain.compaction.control.observation import judge_observation, observation_effects
from domain.compaction.gain import (
    NO_GAIN,
    TOKEN_RATES,
    GainInputs,
    Rates,
    estimate_gain,
    project,
    rates_of,
    token_rates,
)
from domain.compaction.triggers import (
    FORCED,
    CompactionState,
    Counters,
    GainCheck,
    LastAttempt,
    Observation,
    evaluate_triggers,
)
from domain.policy.context_policy import CompactionPolicy, ContextPolicy, effective_policy
from domain.pricing import ModelPrices
from domain.window.budget import ModelProfile
from schemas.wire import BudgetObservation, ControlEvent

BUDGET = 10_000
RATIO = CompactionPolicy()  # context_ratio 0.8 (fires at 8,000), summary_max_ratio 0.15
NOW = 1_700_000_000_000
# At 8,000 of 10,000 with 3,000 compressible tokens, 9 model calls since the last summary:
#   summary = ceil(3,000 / 6) = 500; after = 8,000 - 3,000 + 500 = 5,500
#   saved = 9 * (8,000 - 5,500) * 100 = 2,250,000
#   cost = (5,500 - fixed) * (1,000 - 100)
# so with a fixed overhead of 3,000 the cost is exactly 2,250,000 too.
BOUNDARY_FIXED = 3_000
STEPS = 9
COMPRESSIBLE = 3_000
# Token prices: rates 1,000 / 100 / 1,000 / 1,000 per token, as without prices.
PER_TOKEN = ModelPrices(input=1.0, output=1.0, cached_input=0.1, cache_write=1.0)


def gain(fixed: int, estimated: int = 8_000) -> GainInputs:
    return GainInputs(estimated, BUDGET, fixed, COMPRESSIBLE, STEPS)


def decide(
    fixed: int, estimated: int = 8_000, policy: CompactionPolicy = RATIO, last: bool = False
) -> tuple[bool, str | None, tuple[str, ...]]:
    memory = LastAttempt("old", COMPRESSIBLE, Counters(1, STEPS), BUDGET, 500, NO_GAIN)
    d = evaluate_triggers(
        CompactionState(totals=Counters(3, STEPS), last_attempt=memory if last else None),
        policy,
        Observation(estimated, BUDGET, 500, COMPRESSIBLE, "fp"),
        GainCheck(fixed),
    )
    return d.start_job, d.reason, d.notes


@pytest.mark.spec("R9.4")
def test_saved_equal_to_cost_pays_one_token_more_cost_does_not() -> None:
    at = estimate_gain(RATIO, gain(BOUNDARY_FIXED), None)
    assert (at.saved, at.cost, at.after, at.calls) == (2_250_000, 2_250_000, 5_500, 9)
    assert not at.forced and at.pays
    below = estimate_gain(RATIO, gain(BOUNDARY_FIXED - 1), None)
    assert below.cost == below.saved + 900 and not below.pays
    assert estimate_gain(RATIO, gain(BOUNDARY_FIXED + 1), None).pays
    # The summarizer's per-job overhead is part of the cost: one token tips it.
    assert not estimate_gain(RATIO, gain(BOUNDARY_FIXED), None, overhead=1).pays


@pytest.mark.spec("R9.4")
def test_a_job_that_does_not_pay_is_deferred_with_reason_no_gain() -> None:
    assert decide(BOUNDARY_FIXED) == (True, None, ())
    assert decide(BOUNDARY_FIXED - 1) == (False, NO_GAIN, ())
    assert NO_GAIN == "no_gain"
    d = evaluate_triggers(
        CompactionState(totals=Counters(3, STEPS)),
        RATIO,
        Observation(8_000, BUDGET, 500, COMPRESSIBLE, "fp"),
        GainCheck(BOUNDARY_FIXED - 1),
    )
    assert d.fired == ("context_ratio",)
    assert d.values["gain_saved"] == 2_250_000 and d.thresholds["gain_saved"] == 2_250_900


def test_without_a_gain_check_the_thresholds_alone_decide() -> None:
    d = evaluate_triggers(
        CompactionState(totals=Counters(3, STEPS)),
        RATIO,
        Observation(8_000, BUDGET, 500, COMPRESSIBLE, "fp"),
    )
    assert d.start_job and "gain_saved" not in d.values


@pytest.mark.spec("R9.7")
def test_the_hard_budget_is_never_blocked_by_no_gain() -> None:
    # Over the hard budget: forced, with the ratio trigger on or off.
    assert decide(0, estimated=BUDGET + 1)[:2] == (True, None)
    no_ratio = replace(RATIO, context_ratio=None)
    assert decide(0, estimated=BUDGET + 1, policy=no_ratio)[:2] == (True, None)
    # Fewer than two calls of growth left below it: forced as well. Growth is the view
    # after the fixed overhead over the calls: ceil((8,727 - 3,000) / 9) = 637, and
    # 1,273 tokens left < 2 * 637; at 8,726 (growth 637 too) 1,274 are left: not forced.
    forced = estimate_gain(RATIO, gain(3_000, estimated=8_727), None)
    assert (forced.growth, forced.forced) == (637, True)
    assert not estimate_gain(RATIO, gain(3_000, estimated=8_726), None).forced


@pytest.mark.spec("R9.5", "R9.7")
def test_after_a_no_gain_deferral_the_retry_gate_never_holds_back_the_hard_budget() -> None:
    # The last check deferred for no gain and nothing grew since: the retry gate holds
    # a job that is not forced (and the gain is still checked: it does not pay) ...
    assert decide(BOUNDARY_FIXED - 1, last=True)[:2] == (False, "below_retry_growth_gate")
    # ... but not one the hard budget forces.
    assert decide(0, estimated=BUDGET + 1, last=True) == (True, None, (FORCED,))
    # After an attempt that was a job (no mark), the gate holds as before (R9.5).
    d = evaluate_triggers(
        CompactionState(
            totals=Counters(3, STEPS),
            last_attempt=LastAttempt("old", COMPRESSIBLE, Counters(1, STEPS), BUDGET, 500),
        ),
        RATIO,
        Observation(BUDGET + 1, BUDGET, 500, COMPRESSIBLE, "fp"),
        GainCheck(0),
    )
    assert (d.start_job, d.reason) == (False, "below_retry_growth_gate")


def test_a_turn_trigger_runs_as_configured() -> None:
    turns = replace(RATIO, user_turns=3)
    assert decide(BOUNDARY_FIXED - 1, policy=turns)[:2] == (True, None)  # user_turns fired


def test_prices_become_exact_integer_rates() -> None:
    prices = ModelPrices(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75)
    r = token_rates(prices)  # pico-units per token
    assert (r.input, r.cached, r.write, r.output) == (3_000_000, 300_000, 3_750_000, 15_000_000)
    assert token_rates(None) == TOKEN_RATES
    # A four-decimal price is not rounded away (it was 0 at three decimals).
    assert token_rates(ModelPrices(3, 15, cached_input="0.0004")).cached == 400
    # The nano-unit view benchmarks.cost meters in: exact, or refused.
    assert rates_of(prices) == Rates(input=3000, cached=300, write=3750, output=15000)
    assert rates_of(None) == Rates(1000, 100, 1000, 1000) == rates_of(PER_TOKEN)
    with pytest.raises(ValueError):
        rates_of(ModelPrices(3, 15, cached_input="0.0004"))


def _inputs(fixed: int) -> ObservationInputs:
    o = BudgetObservation(8_000, BUDGET, 500, fixed, COMPRESSIBLE, 7, None, "fp", "pol-1")
    return ObservationInputs(
        ControlEvent("obs-1", "s1", "run-1", "main", NOW, o),
        o,
        "main",
        RATIO,
        "pol-1",
        LockedState(None, None),
        None,
        Counters(3, STEPS),
        Counters(0, 0),
        None,
        PER_TOKEN,
    )


@pytest.mark.spec("R9.4")
def test_no_gain_is_a_deferral_in_the_state_report_and_trigger_note() -> None:
    inp = _inputs(BOUNDARY_FIXED - 1)
    verdict = judge_observation(inp, NOW)
    fx = observation_effects(inp, verdict, None, NOW)
    assert fx.request is None and fx.report is not None
    assert (fx.report.kind, fx.report.reason) == ("deferred", "no_gain")
    assert fx.state["deferral_reason"] == "no_gain"
    assert fx.state["last_attempt"].fingerprint == "fp"
    assert fx.state["last_attempt"].rebuild == NO_GAIN  # no job ran: marked
    (note,) = fx.notes
    assert (note.decision, note.reason) == ("deferred", "no_gain")
    # Without prices (the profile has none) the thresholds alone decide: the job starts.
    off = replace(inp, prices=None)
    started = observation_effects(off, judge_observation(off, NOW), JobStart("cmp_1", 1), NOW)
    assert started.request is not None
    assert started.request.target_tokens == 6_000  # target_context_ratio 0.6 of 10,000


def test_the_projection_of_the_default_policy() -> None:
    profile = ModelProfile("m", 16_384, 2_048, 512)
    policy: ContextPolicy = effective_policy({})[0]
    prices = ModelPrices(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75)
    p = project(policy, profile, prices)
    assert 0.9 <= p.cache_share < 1.0
    assert p.calls_per_compaction > 1
    # Faster growth: compactions come sooner, and a smaller share of each request is cached.
    fast = project(policy, profile, prices, growth=1_000)
    assert fast.calls_per_compaction < p.calls_per_compaction
    assert fast.cache_share < p.cache_share
    # Cheaper cached input makes a cheaper call.
    cheap = project(policy, profile, replace(prices, cached_input=0.03))
    assert cheap.cost_per_call < p.cost_per_call


@pytest.mark.spec("R9.4")
def test_the_cost_replay_meets_its_targets() -> None:
    from benchmarks.cost import measure

    r = measure()
    ours = r["policies"]["ours"]
    assert ours["steady_cacheable_share"] >= 0.9
    assert r["verdict"]["cheaper_than_both"] and r["verdict"]["within_budget"]
    assert r["verdict"]["gain_check_cheaper"]


@pytest.mark.spec("R9.4")
def test_a_billed_summarizer_call_is_part_of_the_cost() -> None:
    # The boundary above, with a model summarizer: it reads the 3,000 covered tokens
    # (1,000 each) and writes the 500-token summary (1,000 each) — 3,500,000 more.
    at = estimate_gain(RATIO, gain(BOUNDARY_FIXED), None)
    billed = estimate_gain(RATIO, gain(BOUNDARY_FIXED), None, model_summarizer=True)
    assert billed.cost - at.cost == 3_000 * 1_000 + 500 * 1_000
    assert at.pays and not billed.pays
    d = evaluate_triggers(
        CompactionState(totals=Counters(3, STEPS)),
        RATIO,
        Observation(8_000, BUDGET, 500, COMPRESSIBLE, "fp"),
        GainCheck(BOUNDARY_FIXED, model_summarizer=True),
    )
    assert (d.start_job, d.reason) == (False, NO_GAIN)
    # ... but never in front of the hard budget.
    near = estimate_gain(RATIO, gain(BOUNDARY_FIXED, estimated=9_990), None, model_summarizer=True)
    assert near.forced and near.pays


# A summarizer on a cheaper profile: input 0.1, output 0.4 per million tokens.
CHEAP = ModelPrices(input="0.1", output="0.4")
CHEAP_FIXED = 3_600  # invalidated 1,900 tokens at (1 - 0.1) per token
OVERHEAD = 400


@pytest.mark.spec("R9.4", "R18")
def test_a_billed_summarizer_is_priced_at_its_own_profile_with_its_overhead() -> None:
    # In pico-units: saved 9 * 2,500 * 100,000 = 2,250,000,000; cost 1,900 * 900,000
    # (the re-written prefix at the action's rates) + (3,000 covered + 400 overhead) *
    # 100,000 + 500 summary * 400,000 (the summarizer's) = 2,250,000,000: it pays, just.
    g = gain(CHEAP_FIXED)
    own = estimate_gain(RATIO, g, PER_TOKEN, OVERHEAD, True, summarizer_prices=CHEAP)
    assert (own.saved, own.cost) == (2_250_000_000, 2_250_000_000) and own.pays
    assert not estimate_gain(RATIO, g, PER_TOKEN, OVERHEAD + 1, True, CHEAP).pays
    # At the action model's prices the same job was deferred for no gain.
    assert not estimate_gain(RATIO, g, PER_TOKEN, OVERHEAD, True).pays
    # The processor passes both (the compaction profile's prices and the overhead).
    inp = replace(
        _inputs(CHEAP_FIXED),
        model_summarizer=True,
        summarizer_prices=CHEAP,
        summarizer_overhead=OVERHEAD,
    )
    assert judge_observation(inp, NOW).decision.start_job
    as_action = replace(inp, summarizer_prices=None)
    assert judge_observation(as_action, NOW).decision.reason == NO_GAIN
    one_more = replace(inp, summarizer_overhead=OVERHEAD + 1)
    assert judge_observation(one_more, NOW).decision.reason == NO_GAIN
    # The built-in extractive summarizer bills nothing, whatever overhead is configured.
    free = replace(inp, model_summarizer=False, summarizer_overhead=10**6)
    assert judge_observation(free, NOW).decision.start_job


@pytest.mark.spec("R9.4", "R9.7")
def test_no_gain_never_spends_the_room_for_the_largest_step() -> None:
    # 8,000 of 10,000: 2,000 left. The average growth (ceil(5,001 / 9) = 556, twice 1,112)
    # fits; a deferral is allowed while the largest step still fits after it.
    fixed = BOUNDARY_FIXED - 1
    assert not estimate_gain(RATIO, replace(gain(fixed), step_tokens=2_000), None).forced
    assert estimate_gain(RATIO, replace(gain(fixed), step_tokens=2_001), None).forced
    at = evaluate_triggers(
        CompactionState(totals=Counters(3, STEPS)),
        RATIO,
        Observation(8_000, BUDGET, 500, COMPRESSIBLE, "fp"),
        GainCheck(fixed, step_tokens=2_000),
    )
    assert (at.start_job, at.reason) == (False, NO_GAIN)
    over = evaluate_triggers(
        CompactionState(totals=Counters(3, STEPS)),
        RATIO,
        Observation(8_000, BUDGET, 500, COMPRESSIBLE, "fp"),
        GainCheck(fixed, step_tokens=2_001),
    )
    assert over.start_job
    # The step is the larger of the view's largest group and the release's largest
    # tool result (large_result_policy.inline_max_tokens).
    inp = _inputs(fixed)
    assert judge_observation(replace(inp, result_cap=2_000), NOW).decision.reason == NO_GAIN
    assert judge_observation(replace(inp, result_cap=2_001), NOW).decision.start_job
    seen = replace(inp.observation, largest_step_tokens=2_001)
    assert judge_observation(replace(inp, observation=seen), NOW).decision.start_job
    seen = replace(inp.observation, largest_step_tokens=2_000)
    assert judge_observation(
        replace(inp, observation=seen, result_cap=10), NOW
    ).decision.reason == (NO_GAIN)


@pytest.mark.spec("R9.4", "R18")
def test_the_summarizer_overhead_setting_decides_whether_a_billed_job_pays() -> None:
    """``ALC_SUMMARIZER_OVERHEAD_TOKENS`` reaches the processor's decision: the same job
    starts at 400 and is deferred ``no_gain`` at 401 (its exact boundary above); with the
    built-in summarizer the setting counts for nothing."""
    from schemas.settings import Settings
    from streams.wiring import gain_settings

    def judged(**kw: object) -> str | None:
        gs = gain_settings(Settings(**kw))  # type: ignore[arg-type]
        inp = replace(
            _inputs(CHEAP_FIXED),
            model_summarizer=gs.model_summarizer,
            summarizer_prices=CHEAP,
            summarizer_overhead=gs.summarizer_overhead,
        )
        d = judge_observation(inp, NOW).decision
        return "start" if d.start_job else d.reason

    model = {"summarizer": "openai", "summarizer_base_url": "http://m", "summarizer_model": "m"}
    assert judged(**model, summarizer_overhead_tokens=OVERHEAD) == "start"
    assert judged(**model, summarizer_overhead_tokens=OVERHEAD + 1) == NO_GAIN
    assert judged(summarizer_overhead_tokens=10**6) == "start"
