"""Does a compaction pay for itself (pure, exact integers)?

Providers read an unchanged request prefix from their cache at about a tenth of the
fresh-input price. A compaction replaces the old history with a summary: every later call
reads fewer tokens, but the job has a fixed cost — the cached prefix it invalidates (the
view after its fixed overhead is written to the cache again, once) and the summarizer's
per-job overhead (its instruction). What the summarizer reads and writes for the covered
groups is paid once per token whenever they are summarized, so it does not depend on
when the job runs and is left out. ``estimate_gain`` weighs, for a job the ratio trigger
started:

- ``after`` — the view once the job committed: the estimate without the compressible
  groups, plus their summary (a sixth of them, ``SUMMARY_SHARE``, within the bound
  ``summary_max_ratio``);
- ``calls`` — the model calls since the last summary (at least 1): at the same growth the
  next cycle lasts as long, so it is the horizon of the saving;
- ``saved = calls * (estimated - after) * cached`` — the removed tokens, not read from
  the cache on each of those calls;
- ``cost = invalidated * (write - cached) + overhead * input`` — ``invalidated`` is the
  view after its fixed overhead (tools, system), ``overhead`` the summarizer's tokens per
  job besides the groups (0 for the built-in extractive summarizer, which calls no model).

Deferring a job that does not pay lets the view grow: ``saved`` grows with it (more
calls, more removable tokens) until the job pays or the hard budget forces it.

Rates are integer nano-units per token (a price per million tokens * 1,000), so the
boundary is exact: ``saved == cost`` pays (the job runs: breaking even still frees room).
Without a price table, tokens are priced input 1, cached 0.1, cache write 1, output 1.

A job is ``forced`` — it runs whatever the gain — when the estimate is over the hard
budget, or when fewer than ``HEADROOM_CALLS`` calls of growth are left below it (the job
must commit before a call would be refused). ``growth`` overestimates the tokens per call
(safe for the guard): the view after the fixed overhead over the calls since the last
summary. ``benchmarks.cost`` replays a 1,000-question session with and without the check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from domain.context.budget import ModelProfile
from domain.policy.context_policy import CompactionPolicy, ContextPolicy
from domain.pricing import ModelPrices

HEADROOM_CALLS = 2  # calls of growth a deferred session keeps below the hard budget
NANO = 1000  # rate units per (price per million tokens): nano-units per token
CALLS_PER_TURN = 2  # the projection's model calls per user turn
NO_GAIN = "no_gain"
SUMMARY_SHARE = 6  # a summary adds about a sixth of what it covers (within its bound)


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


def estimate_gain(
    policy: CompactionPolicy,
    g: GainInputs,
    prices: ModelPrices | None,
    overhead: int = 0,
    model_summarizer: bool = False,
) -> GainEstimate:
    """What a job saves over the calls until the next one against what it costs: the
    cached prefix it invalidates (re-written after the summary) and, with a billed
    ``model_summarizer``, the summarizer call (the covered tokens and ``overhead`` in,
    the summary out; the built-in extractive summarizer costs nothing)."""
    r = rates_of(prices)
    compressible = max(0, g.compressible_tokens)
    bound = ceil_ratio(policy.summary_max_ratio, g.input_budget)
    summary = min(bound, -(-compressible // SUMMARY_SHARE))
    after = min(g.estimated_input, g.estimated_input - compressible + summary)
    calls = max(1, g.model_steps)
    saved = calls * (g.estimated_input - after) * r.cached
    invalidated = max(0, after - g.fixed_overhead)
    cost = invalidated * max(0, r.write - r.cached) + overhead * r.input
    if model_summarizer:
        cost += compressible * r.input + summary * r.output
    growth = max(1, -(-(g.estimated_input - g.fixed_overhead) // calls))
    forced = g.input_budget - g.estimated_input < HEADROOM_CALLS * growth
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
    grows until a turn trigger fires, or the ratio trigger fires and the job pays, or the
    job is forced. Each call reads the previous request from the cache and writes the
    rest; the job is billed as a model summarizer reading the covered tokens and writing
    the summary (the built-in extractive one costs nothing)."""
    budget = profile.input_budget()
    c = policy.compaction
    g = max(1, budget // 50 if growth is None else growth)
    fixed = budget // 10 if fixed_overhead is None else fixed_overhead
    summary = ceil_ratio(c.summary_max_ratio, budget)
    after = fixed + summary + policy.recent_complete_groups * CALLS_PER_TURN * g
    r = rates_of(prices)
    cached, fresh, size, calls = fixed, after - fixed, after, 1
    while size + g <= budget:
        gain = estimate_gain(c, GainInputs(size, budget, fixed, size - after, calls), prices)
        ratio = c.context_ratio is not None and size >= ceil_ratio(c.context_ratio, budget)
        if _turn_due(c, calls) or (ratio and gain.pays):
            break
        cached, fresh, size, calls = cached + size, fresh + g, size + g, calls + 1
    job = (size - after) * r.input + summary * r.output
    total = cached * r.cached + fresh * r.write + job
    unit = NANO * (1_000_000 if prices else 1)
    return Projection(cached / (cached + fresh), total / calls / unit, calls)


def _turn_due(c: CompactionPolicy, calls: int) -> bool:
    if c.model_steps is not None and calls >= c.model_steps:
        return True
    return c.user_turns is not None and calls >= c.user_turns * CALLS_PER_TURN
