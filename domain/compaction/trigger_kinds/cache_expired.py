"""``cache_expired``: a session that comes back after its model's prompt cache expired
(idle since its last model call at least the profile's ``cache_ttl``) pays its whole
prefix again on the next call, so compacting then destroys nothing cached. With the
ratio trigger on, a view at or above ``target_context_ratio`` — a compaction due soon —
is compacted at that point: the condition fires, no gain check applies (the cache a job
would destroy is gone), and it lets a job past the retry gate after a ``no_gain``
deferral (whose reason, the warm cache, is gone). A job it alone starts must remove at
least ``retry_growth_ratio`` of the budget (``too_little_compressible`` otherwise), so a
view that stays above the target after a commit is not compacted again at every return.
"""

from __future__ import annotations

from domain.compaction.trigger_kinds.kind import (
    Reading,
    TriggerDecision,
    TriggerInputs,
    TriggerKind,
    ratio_threshold,
)

REASON = "cache_expired"
# Why a job ``cache_expired`` alone would start does not: it would remove too little.
TOO_LITTLE = "too_little_compressible"
CACHE_EXPIRED_AFTER_NO_GAIN = "cache_expired_after_no_gain"  # the note of such a job


def _check(i: TriggerInputs, fired: tuple[str, ...]) -> Reading | None:
    """The cache expired while the session was idle and the view is at or above the
    target (with the ratio trigger on): reported beside the other conditions."""
    policy, obs = i.policy, i.obs
    idle = obs.idle_ms
    if policy.context_ratio is None or idle is None or idle < obs.cache_ttl_ms:
        return None
    target = ratio_threshold(policy.target_context_ratio, obs.input_budget)
    return Reading(
        {"idle_ms": idle, "cache_expired_tokens": obs.estimated_input},
        {"idle_ms": obs.cache_ttl_ms, "cache_expired_tokens": target},
        obs.estimated_input >= target,
    )


def _brought_forward(d: TriggerDecision, i: TriggerInputs, after_no_gain: bool) -> TriggerDecision:
    """A check at which the cache had expired: no gain check (nothing cached to destroy);
    after a ``no_gain`` deferral the retry gate does not hold the job back (no job ran
    since, and the deferral's reason is gone); a job this condition alone starts must
    remove at least the retry gate's tokens."""
    if not d.start_job:
        if after_no_gain and d.reason == "below_retry_growth_gate":
            notes = (CACHE_EXPIRED_AFTER_NO_GAIN,)
            return TriggerDecision(True, d.fired, d.values, d.thresholds, notes=notes)
        return d
    gate = ratio_threshold(i.policy.retry_growth_ratio, i.obs.input_budget)
    if d.fired == (REASON,) and i.obs.compressible_tokens < gate:
        return TriggerDecision(False, d.fired, d.values, d.thresholds, TOO_LITTLE)
    return d


# enabled by ``compaction.context_ratio`` (it brings a ratio compaction forward)
KIND = TriggerKind(REASON, "context_ratio", _check, settle=_brought_forward)
