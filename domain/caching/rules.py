"""What the providers' prompt caches do with a request, as documented
(docs/prompt-caching.md). Pure constants and one frozen record.

Anthropic Messages caches a request prefix (tools, then system, then messages) only up to
a block marked ``cache_control``; a request may carry at most four marks; each mark finds
an entry an earlier request wrote at that block or at one of the ~20 blocks before it
(the lookback), never further; a prefix shorter than the model's minimum (1,024, 2,048 or
4,096 tokens by model family) is not cached at all; an entry lives five minutes (or one
hour, ``"ttl": "1h"``) from its last use; writing one costs 1.25x the input price (2x
for one hour), reading it 0.1x.

OpenAI caches without marks: a prompt of at least 1,024 tokens has its prefix cached in
128-token steps, kept for 5-10 minutes of inactivity (always gone within the hour), or up
to 24 hours with ``"prompt_cache_retention": "24h"`` (the models that offer it), with no
write premium either way; ``prompt_cache_key`` routes a thread's requests to the same
cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

# Anthropic
MAX_BREAKPOINTS = 4  # the API refuses a request with more
LOOKBACK_BLOCKS = 20  # a mark finds an entry at most this many blocks back, itself included
CACHE_TTLS = {"5m": 300, "1h": 3_600, "24h": 86_400}  # lifetime from the last use, seconds
DEFAULT_TTL = "5m"  # Anthropic's default; OpenAI's in-memory retention (its lower end)
# The lifetimes each provider format offers (``cache_ttl`` of a model profile) are its
# ``ProviderFormat.cache_ttls`` (domain/context/formats/).
DEFAULT_MIN_TOKENS = 1_024  # most Claude models; Haiku 3/3.5 2,048; Opus 4.5, Haiku 4.5 4,096
WRITE_PREMIUM = {"5m": Fraction(5, 4), "1h": Fraction(2)}  # times the input price

# OpenAI (automatic)
OPENAI_MIN_TOKENS = 1_024
OPENAI_STEP_TOKENS = 128


@dataclass(frozen=True)
class CacheRules:
    """A model's cache rules, from its profile (``cache_min_tokens``, ``cache_ttl``): the
    shortest prefix its provider caches and how long an entry lives — Anthropic: the
    lifetime of the marks that must outlive a user's pause (``domain.caching.breakpoints``);
    OpenAI: the retention (``24h``: extended, rendered as ``prompt_cache_retention``)."""

    min_tokens: int = DEFAULT_MIN_TOKENS
    ttl: str = DEFAULT_TTL

    def __post_init__(self) -> None:
        if self.ttl not in CACHE_TTLS:
            raise ValueError(f"cache ttl {self.ttl!r} is not one of {sorted(CACHE_TTLS)}")

    @property
    def ttl_s(self) -> int:
        return CACHE_TTLS[self.ttl]

    @property
    def write_premium(self) -> Fraction:
        """What writing a token for this lifetime costs, in input prices (Anthropic)."""
        return WRITE_PREMIUM.get(self.ttl, Fraction(1))


def openai_cached(prefix_tokens: int) -> int:
    """The tokens OpenAI reports cached for a matching prefix of ``prefix_tokens``: none
    under 1,024, then whole 128-token steps past it."""
    if prefix_tokens < OPENAI_MIN_TOKENS:
        return 0
    steps = (prefix_tokens - OPENAI_MIN_TOKENS) // OPENAI_STEP_TOKENS
    return OPENAI_MIN_TOKENS + steps * OPENAI_STEP_TOKENS
