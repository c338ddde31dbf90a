"""The policy preview's projection under the providers' real cache rules (issue 39).
Pure.

``domain.compaction.gain.project`` bills a steady compaction cycle as if each call read
the whole previous request from the cache (the ideal bound). Here the same cycle's
requests are replayed (``domain.caching.replay``) through the cache of the profile's
provider format, with the marks our renderer would put on them
(``domain.caching.breakpoints``) and the profile's minimum prefix and lifetime: what is
read, what is written (Anthropic: 1.25x the input price, 2x for what a 1-hour mark keeps)
and what is fresh input; and through the ideal cache, so the difference is the price of
the real rules. The cycle is ``project``'s: the fixed part (a tenth of the budget), the
summary at its bound and the kept recent groups, then one block of growth per call (a
fiftieth of the budget), a user turn every ``CALLS_PER_TURN`` calls, a call every
``CALL_S`` seconds (no idle gap: ``benchmarks.cost`` replays a session with them). Two
cycles are replayed and the second is measured: the first warms the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from domain.caching.breakpoints import Anchors, place
from domain.caching.replay import (
    AnthropicCache,
    Block,
    IdealCache,
    OpenAICache,
    PromptCache,
    Sent,
    Tally,
    prefix_tokens,
)
from domain.caching.rules import CacheRules
from domain.compaction.gain import CALLS_PER_TURN, ceil_ratio
from domain.context.formats.table import FORMAT_TABLE
from domain.policy.context_policy import ContextPolicy
from domain.pricing import ModelPrices
from domain.window.budget import ModelProfile

CALL_S = 30.0  # seconds between two model calls of the projected session
PER = 1_000_000  # prices are per million tokens


@dataclass(frozen=True)
class CacheProjection:
    share: float  # of input read from the cache under the format's real rules
    ideal_share: float  # ... if each call read the whole previous request
    extra_cost_per_call: float  # what the real rules add per call (prices' unit)


def project_cache(policy: ContextPolicy, profile: ModelProfile, calls: int) -> CacheProjection:
    """A compaction cycle of ``calls`` model calls (``project``'s) under ``profile``'s
    provider format and cache rules, against the ideal cache."""
    rules, calls = profile.cache_rules, max(1, calls)
    fmt = FORMAT_TABLE.get(profile.provider_format)
    anthropic = fmt is not None and fmt.cache_marks  # marks placed as Anthropic's are
    real: PromptCache = AnthropicCache(rules) if anthropic else OpenAICache(rules)
    ideal = IdealCache()
    real_t, ideal_t = Tally(), Tally()
    for n, blocks in enumerate(_requests(policy, profile, calls, "0", "1")):
        sent = _marked(blocks, rules, n * CALL_S) if anthropic else Sent(blocks, (), n * CALL_S)
        t, i = real.send(sent), ideal.send(sent)
        if n >= calls:  # the second cycle
            real_t, ideal_t = real_t + t, ideal_t + i
    inp, cached, write = _rates(profile.prices)
    # Anthropic bills a 5-minute write at the profile's cache-write price and a 1-hour
    # one at its premium; OpenAI writes nothing (what is not read is fresh input).
    short_write = write if anthropic else inp
    real_bill = (
        real_t.read * cached
        + (real_t.written - real_t.long_written) * short_write
        + real_t.long_written * inp * rules.write_premium
        + real_t.fresh * inp
    )
    ideal_bill = ideal_t.read * cached + ideal_t.written * write
    return CacheProjection(
        real_t.read / real_t.total,
        ideal_t.read / ideal_t.total,
        float((real_bill - ideal_bill) / calls),
    )


def _requests(
    policy: ContextPolicy, profile: ModelProfile, calls: int, *cycles: str
) -> list[list[Block]]:
    """Each cycle's requests: after a commit, the fixed part, the summary and the kept
    groups, then one block more per call."""
    budget = profile.input_budget()
    g = max(1, budget // 50)  # as ``project``: 2% of the budget per call
    summary = ceil_ratio(policy.compaction.summary_max_ratio, budget)
    recent = max(0, policy.recent_complete_groups) * CALLS_PER_TURN
    out = []
    for c in cycles:
        head = [Block("fixed", budget // 10), Block(f"summary{c}", summary)]
        head += [Block(f"recent{c}.{j}", g) for j in range(recent)]
        out += [head + [Block(f"step{c}.{j}", g) for j in range(k)] for k in range(calls)]
    return out


def _marked(blocks: list[Block], rules: CacheRules, at_s: float) -> Sent:
    """The marks our Anthropic renderer would put on this request: each step's block is
    a call's growth, every ``CALLS_PER_TURN``-th one starting a user turn."""
    last, steps = len(blocks) - 1, [i for i, b in enumerate(blocks) if b.key.startswith("step")]
    turns = [i for n, i in enumerate(steps) if n % CALLS_PER_TURN == 0]
    anchors = Anchors(0, 1, turns[-1] - 1 if turns else None, last, last - 1 if steps else None)
    marks = place(anchors, prefix_tokens(blocks), rules)
    return Sent(blocks, tuple(m.position for m in marks), at_s, tuple(m.ttl for m in marks))


def _rates(prices: ModelPrices | None) -> tuple[Fraction, Fraction, Fraction]:
    """Input, cached-input and cache-write prices per token (in the prices' currency;
    without prices in input-token units: 1, 0.1 and 1, as ``project`` weighs them)."""
    if prices is None:
        return Fraction(1), Fraction(1, 10), Fraction(1)
    inp = Fraction(str(prices.input)) / PER
    cached = inp if prices.cached_input is None else Fraction(str(prices.cached_input)) / PER
    write = inp if prices.cache_write is None else Fraction(str(prices.cache_write)) / PER
    return inp, cached, write
