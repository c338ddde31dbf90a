"""Does a compaction pay for itself (pure, exact integers)?

Providers read an unchanged request prefix from their cache at about a tenth of the
fresh-input price. A compaction replaces the old history with a summary: every later call
reads fewer tokens, but the job has a fixed cost — the cached prefix it invalidates (the
view after its fixed overhead is written to the cache again, once) and the summarizer's
per-job overhead (its instruction). ``estimate_gain`` weighs, for a job the ratio trigger
started:

- ``after`` — the view once the job committed: the estimate without the compressible
  groups, plus their summary (a sixth of them, ``SUMMARY_SHARE``, within the bound
  ``summary_max_ratio``);
- ``calls`` — the model calls since the last summary (at least 1): at the same growth the
  next cycle lasts as long, so it is the horizon of the saving;
- ``saved = calls * (estimated - after) * cached`` — the removed tokens, not read from
  the cache on each of those calls, at the action model's prices;
- ``cost = invalidated * (write - cached) + overhead * input'`` — ``invalidated`` is the
  view after its fixed overhead (tools, system), ``overhead`` the summarizer's tokens per
  job besides the groups; with a billed model summarizer also ``compressible * input' +
  summary * output'``. Primed rates are the summarizer's own: the prices of the profile
  the ``compaction`` purpose is budgeted on (the action's when that is the same). The
  built-in extractive summarizer calls no model: its overhead is 0 and it bills nothing.

Deferring a job that does not pay lets the view grow: ``saved`` grows with it (more
calls, more removable tokens) until the job pays or the hard budget forces it.

Rates are the prices' exact integer pico-units per token (``ModelPrices.rates``), so the
boundary is exact: ``saved == cost`` pays (the job runs: breaking even still frees room).
Without a price table, tokens are priced input 1, cached 0.1, cache write 1, output 1.

A job is ``forced`` — it runs whatever the gain — when the estimate is over the hard
budget, when fewer than ``HEADROOM_CALLS`` calls of average growth are left below it (the
job must commit before a call would be refused), or when the next call would not fit
after ``step_tokens``: the largest step this thread has grown by, or the release's
largest tool result, whichever is larger. A ``no_gain`` deferral never spends the room
the hard budget keeps (InputBudget already leaves out the safety margin, R6.1): one more
step of the largest size seen still fits. ``growth`` overestimates the average tokens per
call: the view after the fixed overhead over the calls since the last summary.
``benchmarks.cost`` replays a 1,000-question session with and without the check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from domain.policy.context_policy import CompactionPolicy, ContextPolicy
from domain.pricing import PICO, ModelPrices, TokenRates
from domain.window.budget import ModelProfile

HEADROOM_CALLS = 2  # calls of growth a deferred session keeps below the hard budget
CALLS_PER_TURN = 2  # the projection's model calls per user turn
NO_GAIN = "no_gain"
SUMMARY_SHARE = 6  # a summary adds about a sixth of what it covers (within its bound)
# Without prices: a token is 1,000 units of input, output or cache write, 100 cached.
TOKEN_RATES = TokenRates(input=1000, cached=100, write=1000, write_1h=2000, output=1000)
TOKEN_UNIT = 1000  # TOKEN_RATES' units per input token


def token_rates(prices: ModelPrices | None) -> TokenRates:
    """What the estimate weighs: the prices' exact pico-units per token, or TOKEN_RATES."""
    return TOKEN_RATES if prices is None else prices.rates()


@dataclass(frozen=True)
class Rates:
    """Integer nano-units of the currency per token: the unit ``benchmarks.cost``
    meters its replay in."""

    input: int
    cached: int
    write: int
    output: int


def rates_of(prices: ModelPrices | None) -> Rates:
    """``prices`` in nano-units per token (TOKEN_RATES' numbers without prices). Exact:
    a price finer than a thousandth per million tokens has no whole nano-unit per token
    and raises ValueError — the estimate itself weighs pico-units (``token_rates``)."""
    r = token_rates(prices)
    scale = 1 if prices is None else PICO // 10**9  # pico-units per nano-unit
    parts = (r.input, r.cached, r.write, r.output)
    if any(p % scale for p in parts):
        raise ValueError(f"prices finer than nano-units per token: {prices}")
    return Rates(*(p // scale for p in parts))


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
    # The most the view may grow by before the next call: the largest step this thread
    # grew by, or the release's largest tool result, whichever is larger.
    step_tokens: int = 0


@dataclass(frozen=True)
class GainEstimate:
    saved: int  # in the rates' units
    cost: int  # in the rates' units
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
    summarizer_prices: ModelPrices | None = None,
) -> GainEstimate:
    """What a job saves over the calls until the next one against what it costs: the
    cached prefix it invalidates (re-written after the summary) and the summarizer's
    ``overhead``; with a billed ``model_summarizer`` also the summarizer call (the
    covered tokens in, the summary out). The summarizer's tokens are priced at
    ``summarizer_prices`` (the ``compaction`` purpose's profile; None: ``prices``)."""
    r = token_rates(prices)
    s = r if summarizer_prices is None or prices is None else summarizer_prices.rates()
    compressible = max(0, g.compressible_tokens)
    bound = ceil_ratio(policy.summary_max_ratio, g.input_budget)
    summary = min(bound, -(-compressible // SUMMARY_SHARE))
    after = min(g.estimated_input, g.estimated_input - compressible + summary)
    calls = max(1, g.model_steps)
    saved = calls * (g.estimated_input - after) * r.cached
    invalidated = max(0, after - g.fixed_overhead)
    cost = invalidated * max(0, r.write - r.cached) + overhead * s.input
    if model_summarizer:
        cost += compressible * s.input + summary * s.output
    growth = max(1, -(-(g.estimated_input - g.fixed_overhead) // calls))
    left = g.input_budget - g.estimated_input
    forced = left < HEADROOM_CALLS * growth or left < g.step_tokens
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
    r = token_rates(prices)
    cached, fresh, size, calls = fixed, after - fixed, after, 1
    while size + g <= budget:
        gain = estimate_gain(c, GainInputs(size, budget, fixed, size - after, calls), prices)
        ratio = c.context_ratio is not None and size >= ceil_ratio(c.context_ratio, budget)
        if _turn_due(c, calls) or (ratio and gain.pays):
            break
        cached, fresh, size, calls = cached + size, fresh + g, size + g, calls + 1
    job = (size - after) * r.input + summary * r.output
    total = cached * r.cached + fresh * r.write + job
    unit = PICO if prices else TOKEN_UNIT
    return Projection(cached / (cached + fresh), total / calls / unit, calls)


def _turn_due(c: CompactionPolicy, calls: int) -> bool:
    if c.model_steps is not None and calls >= c.model_steps:
        return True
    return c.user_turns is not None and calls >= c.user_turns * CALLS_PER_TURN
