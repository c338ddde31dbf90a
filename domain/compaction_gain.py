"""Does a compaction pay for itself (pure, exact integers)?

Providers read an unchanged request prefix from their cache at about a tenth of the
fresh-input price. A compaction replaces the old history with a summary: every later call
reads fewer tokens, but the compaction costs the summarizer's call and re-reads, once and
at the fresh (or cache-write) price, everything from the summary onwards — the cached
prefix it invalidates. ``estimate_gain`` weighs the two over the calls until the next
compaction would be due:

- ``after`` — the view once the job committed: the estimate without the compressible
  groups, plus a summary as large as its bound (``summary_max_ratio``; conservative: the
  summary that replaces the parent one is never larger);
- ``growth`` — tokens per model call: the compressible tokens over the model steps since
  the last summary (rounded up);
- ``calls`` — model calls until a trigger would fire again from ``after``: the ratio
  threshold, the turn triggers, and the hard budget, whichever is first (at least 1);
- ``saved = calls * (estimated - after) * cached`` — what the removed tokens would cost
  read from the cache on each of those calls;
- ``cost = compressible * input + summary * output + invalidated * (write - cached)`` —
  the summarizer reads the groups fresh and writes the summary; ``invalidated`` is the
  view after its fixed overhead (tools, system): cached before, written again once.

Rates are integer nano-units per token (a price per million tokens * 1,000), so the
boundary is exact: ``saved == cost`` pays (the job runs: breaking even still frees room).
Without a price table, tokens are priced input 1, cached 0.1, cache write 1, output 1.

A job is ``forced`` — it runs whatever the gain — when the estimate is over the hard
budget, or when fewer than ``HEADROOM_CALLS`` calls of growth are left below it (the job
must commit before a call would be refused).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from domain.budget import ModelProfile
from domain.policy import CompactionPolicy, ContextPolicy
from domain.pricing import ModelPrices

HEADROOM_CALLS = 2  # calls of growth a deferred session keeps below the hard budget
NANO = 1000  # rate units per (price per million tokens): nano-units per token
CALLS_PER_TURN = 2  # the projection's model calls per user turn
NO_GAIN = "no_gain"


@dataclass(frozen=True)
class Rates:
    """Integer nano-units per token."""

    input: int
    cached: int
    write: int
    output: int


TOKEN_RATES = Rates(input=1000, cached=100, write=1000, output=1000)


def _nano(price: float) -> int:
    return round(Fraction(str(price)) * NANO)


def rates_of(prices: ModelPrices | None) -> Rates:
    if prices is None:
        return TOKEN_RATES
    return Rates(
        _nano(prices.input),
        _nano(prices.cached_rate),
        _nano(prices.write_rate),
        _nano(prices.output),
    )


def ceil_ratio(ratio: float, budget: int) -> int:
    """Smallest token count that reaches ``ratio`` of ``budget`` (exact)."""
    return math.ceil(Fraction(str(ratio)) * budget)


@dataclass(frozen=True)
class GainInputs:
    """One observation as the estimate needs it."""

    estimated_input: int
    input_budget: int
    fixed_overhead: int
    compressible_tokens: int
    user_turns: int  # since the last summary
    model_steps: int  # since the last summary


@dataclass(frozen=True)
class GainEstimate:
    saved: int  # nano-units
    cost: int  # nano-units
    after: int
    growth: int
    calls: int
    forced: bool

    @property
    def pays(self) -> bool:
        return self.forced or self.saved >= self.cost


def calls_until_due(policy: CompactionPolicy, g: GainInputs, after: int, growth: int) -> int:
    """Model calls from ``after`` until a trigger fires again (at least 1)."""
    horizons = [(g.input_budget - after) // growth]
    if policy.context_ratio is not None:
        horizons.append((ceil_ratio(policy.context_ratio, g.input_budget) - after) // growth)
    if policy.model_steps is not None:
        horizons.append(policy.model_steps)
    if policy.user_turns is not None:
        per_turn = max(1, g.model_steps // max(1, g.user_turns))
        horizons.append(policy.user_turns * per_turn)
    return max(1, min(horizons))


def estimate_gain(
    policy: CompactionPolicy, g: GainInputs, prices: ModelPrices | None
) -> GainEstimate:
    r = rates_of(prices)
    compressible = max(0, g.compressible_tokens)
    summary = min(compressible, ceil_ratio(policy.summary_max_ratio, g.input_budget))
    after = min(g.estimated_input, g.estimated_input - compressible + summary)
    growth = max(1, -(-compressible // max(1, g.model_steps)))
    calls = calls_until_due(policy, g, after, growth)
    saved = calls * (g.estimated_input - after) * r.cached
    invalidated = max(0, after - g.fixed_overhead)
    cost = compressible * r.input + summary * r.output + invalidated * max(0, r.write - r.cached)
    headroom = g.input_budget - g.estimated_input
    forced = headroom < HEADROOM_CALLS * growth
    return GainEstimate(saved, cost, after, growth, calls, forced)


@dataclass(frozen=True)
class Projection:
    """A steady-state session under a policy: the share of request tokens that are a
    prefix of the previous request, the cost per model call (compaction included, in the
    prices' currency; in token units without prices) and the calls between compactions."""

    cache_share: float
    cost_per_call: float
    calls_per_compaction: int


def project(
    policy: ContextPolicy,
    profile: ModelProfile,
    prices: ModelPrices | None,
    growth: int | None = None,
    fixed_overhead: int | None = None,
) -> Projection:
    """One compaction cycle of a session growing ``growth`` tokens per call (default 2%
    of the budget) over ``fixed_overhead`` (default 10%): after a commit the view is the
    fixed part, a summary at its bound and the kept recent groups (two calls each); it
    grows until the triggers fire and the compaction pays (or is forced)."""
    budget = profile.input_budget()
    c = policy.compaction
    g = max(1, budget // 50 if growth is None else growth)
    fixed = budget // 10 if fixed_overhead is None else fixed_overhead
    summary = ceil_ratio(c.summary_max_ratio, budget)
    after = fixed + summary + policy.recent_complete_groups * CALLS_PER_TURN * g
    r = rates_of(prices)
    cached = fresh = 0
    size, calls = after, 0
    while True:
        cached += fixed if calls == 0 else size - g
        fresh += g if calls > 0 else size - fixed
        calls += 1
        size += g
        est = estimate_gain(
            c,
            GainInputs(size, budget, fixed, size - after, calls // CALLS_PER_TURN, calls),
            prices,
        )
        if size + g > budget or (_due(c, size, budget, calls) and est.pays):
            break
    compaction = (size - after) * r.input + summary * r.output
    total = cached * r.cached + fresh * r.input + compaction
    return Projection(
        cache_share=cached / (cached + fresh),
        cost_per_call=total / calls / NANO / 1_000_000 if prices else total / calls / NANO,
        calls_per_compaction=calls,
    )


def _due(c: CompactionPolicy, size: int, budget: int, calls: int) -> bool:
    if c.context_ratio is not None and size >= ceil_ratio(c.context_ratio, budget):
        return True
    if c.model_steps is not None and calls >= c.model_steps:
        return True
    return c.user_turns is not None and calls >= c.user_turns * CALLS_PER_TURN
