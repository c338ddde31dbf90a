"""Compaction when the cache is cold anyway (issue 39 item 6): a session back after its
model's prompt cache expired, its view at or above ``target_context_ratio`` but under the
ratio trigger, is compacted at that check (``cache_expired``); a warm cache never lets a
ratio job through that does not pay for the cache it destroys (``no_gain``)."""

from __future__ import annotations

import pytest

from domain.compaction.gain import NO_GAIN
from domain.compaction.triggers import (
    CACHE_EXPIRED,
    CACHE_EXPIRED_AFTER_NO_GAIN,
    DEFAULT_CACHE_TTL_MS,
    TOO_LITTLE,
    CompactionState,
    Counters,
    GainCheck,
    LastAttempt,
    Observation,
    evaluate_triggers,
)
from domain.policy.context_policy import CompactionPolicy
from domain.pricing import ModelPrices
from domain.rollup import observability_increments
from schemas import codec
from schemas.wire import BudgetObservation, ControlEvent, decode_control, encode_control
from services.prepare.bodies import PrepareIn
from tests.unit.test_prepare_context_gateway import history, world

pytestmark = pytest.mark.spec("R7", "R9.5")

BUDGET = 100_000  # target 60,000, ratio trigger 80,000, retry gate 5,000
POLICY = CompactionPolicy()
TTL = 300_000
COLD, WARM = TTL, TTL - 1
EMPTY = CompactionState()
# Anthropic's list prices: a job at 70,000 of 100,000 destroys more cache than it saves.
PRICES = ModelPrices.from_dict(
    {"input": "3", "cached_input": "0.3", "cache_write": "3.75", "output": "15"}
)


def obs(tokens: int, idle: int | None, compressible: int = 40_000) -> Observation:
    return Observation(tokens, BUDGET, 5_000, compressible, f"f{tokens}:{idle}", None, idle, TTL)


def test_the_defaults_are_the_policy_ratios_and_five_minutes() -> None:
    assert (POLICY.context_ratio, POLICY.target_context_ratio) == (0.8, 0.6)
    assert DEFAULT_CACHE_TTL_MS == 300_000


@pytest.mark.parametrize(
    ("tokens", "idle", "fires"),
    [
        (70_000, COLD, True),
        (70_000, WARM, False),  # the cache is still warm: not due yet
        (60_000, COLD, True),  # at the target
        (59_999, COLD, False),  # under it: nothing due soon
        (70_000, None, False),  # no model call yet: no cache to have expired
    ],
)
def test_a_cold_cache_brings_a_due_soon_compaction_forward(
    tokens: int, idle: int | None, fires: bool
) -> None:
    d = evaluate_triggers(EMPTY, POLICY, obs(tokens, idle))
    assert d.start_job is fires
    assert d.fired == ((CACHE_EXPIRED,) if fires else ())
    if fires:
        assert (d.values["idle_ms"], d.thresholds["idle_ms"]) == (idle, TTL)
        assert d.thresholds["cache_expired_tokens"] == 60_000


def test_only_with_the_ratio_trigger_on() -> None:
    turns_only = CompactionPolicy(context_ratio=None, user_turns=5)
    assert evaluate_triggers(EMPTY, turns_only, obs(70_000, COLD)).fired == ()


# 40 steps since the last summary; 6,000 tokens compressible of 85,000: removing them
# saves 40 * 5,000 cached reads, less than re-writing the 78,000 after the summary.
STEPS = Counters(user_turns=10, model_steps=40)
GAIN = GainCheck(fixed_overhead=2_000, prices=PRICES)


def test_with_the_ratio_fired_too_both_are_reported_and_no_gain_check_applies() -> None:
    state = CompactionState(totals=STEPS)
    warm = evaluate_triggers(state, POLICY, obs(85_000, WARM, 6_000), GAIN)
    assert (warm.start_job, warm.reason) == (False, NO_GAIN)  # the warm cache it destroys
    cold = evaluate_triggers(state, POLICY, obs(85_000, COLD, 6_000), GAIN)
    assert cold.start_job and cold.fired == ("context_ratio", CACHE_EXPIRED)


def test_after_a_no_gain_deferral_a_cold_cache_passes_the_retry_gate() -> None:
    deferred = LastAttempt("f-earlier", 6_000, STEPS, BUDGET, 5_000, rebuild=NO_GAIN)
    state = CompactionState(totals=STEPS, last_attempt=deferred)
    warm = evaluate_triggers(state, POLICY, obs(85_000, WARM, 6_000), GAIN)
    assert (warm.start_job, warm.reason) == (False, "below_retry_growth_gate")
    cold = evaluate_triggers(state, POLICY, obs(85_000, COLD, 6_000), GAIN)
    assert cold.start_job and cold.notes == (CACHE_EXPIRED_AFTER_NO_GAIN,)


def test_a_job_it_alone_starts_must_remove_the_retry_gate() -> None:
    small = evaluate_triggers(EMPTY, POLICY, obs(70_000, COLD, compressible=4_999))
    assert (small.start_job, small.reason, small.fired) == (False, TOO_LITTLE, (CACHE_EXPIRED,))
    assert evaluate_triggers(EMPTY, POLICY, obs(70_000, COLD, compressible=5_000)).start_job
    # with another condition fired the job is that condition's: no such floor
    turns = CompactionPolicy(user_turns=2)
    state = CompactionState(totals=Counters(user_turns=2))
    both = evaluate_triggers(state, turns, obs(70_000, COLD, compressible=1_000))
    assert both.start_job and set(both.fired) == {CACHE_EXPIRED, "user_turns"}


def test_the_observation_carries_the_idle_time_and_an_older_one_reads_as_unknown() -> None:
    seen = BudgetObservation(70_000, BUDGET, 5_000, 2_000, 40_000, 9, None, "f", "rev")
    ev = ControlEvent("obs:1", "s1", "r1", "i1", 0, seen)
    now = ControlEvent("obs:1", "s1", "r1", "i1", 0, _with(seen, 400_000, 300_000))
    body = decode_control(encode_control(now)).body
    assert isinstance(body, BudgetObservation)
    assert (body.idle_ms, body.cache_ttl_ms) == (400_000, 300_000)
    raw = {**ev.__dict__, "body": ("agentloom.context.v1.BudgetObservation", _fields(seen))}
    older = decode_control(codec.encode("control_event.v3.avsc", raw)).body
    assert isinstance(older, BudgetObservation)
    assert (older.idle_ms, older.cache_ttl_ms) == (None, None)


def _with(o: BudgetObservation, idle: int, ttl: int) -> BudgetObservation:
    return BudgetObservation(**{**o.__dict__, "idle_ms": idle, "cache_ttl_ms": ttl})


def _fields(o: BudgetObservation) -> dict[str, object]:
    return {k: v for k, v in o.__dict__.items() if k not in ("idle_ms", "cache_ttl_ms")}


def test_the_rollups_count_started_jobs_by_trigger_reason() -> None:
    from schemas.wire import ObservabilityEvent

    ev = ObservabilityEvent(
        "trigger_check",
        "s",
        "r",
        "i",
        0,
        "p",
        decision="job_started",
        fired=("context_ratio", CACHE_EXPIRED),
    )
    incs = {(i.metric, i.label) for i in observability_increments(ev)}
    assert {("jobs_by_trigger", CACHE_EXPIRED), ("jobs_by_trigger", "context_ratio")} <= incs
    held = ObservabilityEvent("trigger_check", "s", "r", "i", 0, "p", decision="deferred")
    assert not [i for i in observability_increments(held) if i.metric == "jobs_by_trigger"]


@pytest.mark.parametrize(("idle", "waits"), [(600_000, True), (60_000, False), (None, False)])
async def test_a_prepare_back_after_the_ttl_observes_it_and_waits_for_the_job(
    idle: int | None, waits: bool
) -> None:
    w = await world()
    history(w, 1, 1100)  # 2,237 of 3,400: over the target (2,040), under the trigger (2,720)
    w.compaction.idle = idle
    w.compaction.outcomes = [{"status": "committed", "stage": "done", "reason": None}]
    await w.svc.preparer.prepare("s1", "r1", PrepareIn())
    [sent] = w.publisher.on("ctx.records")
    seen = decode_control(sent.value).body
    assert isinstance(seen, BudgetObservation)
    assert (seen.idle_ms, seen.cache_ttl_ms) == (idle, None if idle is None else 300_000)
    assert (seen.largest_step_tokens > 0) is waits  # measured only when a trigger fired
    assert (w.compaction.outcomes == []) is waits  # the prepare waited for the job


@pytest.mark.spec("R17")
def test_the_preview_shows_where_a_cold_cache_compacts() -> None:
    from domain.policy.context_policy import effective_policy
    from domain.preview.draft import preview
    from domain.window.budget import ModelProfile

    hour = ModelProfile("m", 16_384, 2_048, 512, cache_ttl="1h")
    (row, *_) = preview(effective_policy({})[0], [hour])
    assert (row.cache_expired_tokens, row.cache_ttl_s) == (row.target_tokens, 3_600)
    turns = effective_policy({"compaction": {"context_ratio": None, "user_turns": 3}})[0]
    (off, *_) = preview(turns, [hour])
    assert (off.cache_expired_tokens, off.cache_ttl_s) == (None, None)
