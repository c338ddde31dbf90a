"""A session's requests replayed through a provider's prompt cache (``domain.caching.rules``).
Pure: a cache is a plain object fed the requests in the order they were sent, each with
the second it was sent at; it answers what that request read from the cache, wrote to
it, and paid as fresh input.

- ``AnthropicCache``: entries exist only where an earlier request put a mark on a prefix
  of at least the model's minimum; a mark reads the longest live entry at its block or
  up to ``LOOKBACK_BLOCKS - 1`` blocks before it; the request writes from there to its
  last mark — up to its last long-lived mark at that lifetime's premium
  (``long_written``), the rest at the 5-minute one; what follows the last mark is fresh.
  An entry lives its mark's lifetime from its last write or read.
- ``OpenAICache``: every request's prefix is cached; a request reads the longest prefix
  it shares with an earlier one still retained (``CacheRules.ttl`` of inactivity), in the
  provider's steps (none under 1,024 tokens, then 128-token steps); the rest is fresh
  (no write premium).
- ``IdealCache``: the longest prefix in common with the previous request, whatever its
  length or age; the rest is written — the bound the real rules are compared with.

Blocks are compared by ``key`` (equal keys: equal content), prefixes by a chained digest.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from domain.caching.rules import CACHE_TTLS, DEFAULT_TTL, LOOKBACK_BLOCKS, CacheRules, openai_cached


@dataclass(frozen=True)
class Block:
    """One cacheable unit of a request: a tool, a system block, a message's content block."""

    key: str
    tokens: int


@dataclass(frozen=True)
class Sent:
    """A request as a cache sees it: its blocks in cache order, the positions of its
    marks (Anthropic) with their lifetimes (``ttls``, one per mark; the default when
    left out) and when it was sent (seconds)."""

    blocks: Sequence[Block]
    marks: tuple[int, ...] = ()
    at_s: float = 0.0
    ttls: tuple[str, ...] = ()

    def ttl_of(self, i: int) -> str:
        return self.ttls[i] if i < len(self.ttls) else DEFAULT_TTL

    @functools.cached_property
    def ids(self) -> list[bytes]:
        """A digest per block of everything up to and including it."""
        return prefix_ids(self.blocks)

    @functools.cached_property
    def sums(self) -> list[int]:
        """The tokens up to and including each block."""
        return prefix_tokens(self.blocks)

    def marked(self, marks: tuple[int, ...], ttls: tuple[str, ...] = ()) -> Sent:
        """The same request with other marks (its digests and sums are kept)."""
        out = Sent(self.blocks, marks, self.at_s, ttls)
        out.__dict__.update({k: v for k, v in self.__dict__.items() if k in ("ids", "sums")})
        return out


@dataclass(frozen=True)
class Tally:
    """One request's input tokens by what the cache did with them (read, written and
    fresh are disjoint; ``long_written`` is the part of ``written`` kept for the rules'
    long lifetime, billed at its premium)."""

    read: int = 0
    written: int = 0
    fresh: int = 0
    long_written: int = 0

    @property
    def total(self) -> int:
        return self.read + self.written + self.fresh

    def __add__(self, other: Tally) -> Tally:
        return Tally(
            self.read + other.read,
            self.written + other.written,
            self.fresh + other.fresh,
            self.long_written + other.long_written,
        )


class PromptCache(Protocol):
    def send(self, sent: Sent) -> Tally:
        """What ``sent`` read, wrote and paid fresh; the cache keeps what it wrote."""
        ...


def prefix_ids(blocks: Sequence[Block]) -> list[bytes]:
    """A digest per block of everything up to and including it."""
    out: list[bytes] = []
    h = b""
    for b in blocks:
        h = hashlib.blake2b(h + b.key.encode(), digest_size=16).digest()
        out.append(h)
    return out


def prefix_tokens(blocks: Sequence[Block]) -> list[int]:
    out, total = [], 0
    for b in blocks:
        total += b.tokens
        out.append(total)
    return out


@dataclass
class AnthropicCache:
    rules: CacheRules = field(default_factory=CacheRules)
    # prefix id -> (last use, lifetime in seconds)
    entries: dict[bytes, tuple[float, int]] = field(default_factory=dict)

    def _live(self, pid: bytes, at: float) -> bool:
        entry = self.entries.get(pid)
        return entry is not None and at - entry[0] <= entry[1]

    def _keep(self, pid: bytes, at: float, ttl_s: int) -> None:
        old = self.entries.get(pid)
        self.entries[pid] = (at, max(ttl_s, old[1] if old else 0))

    def send(self, sent: Sent) -> Tally:
        ids, tokens = sent.ids, sent.sums
        total = tokens[-1] if tokens else 0
        best = -1
        for m in sent.marks:
            for e in range(m, max(-1, m - LOOKBACK_BLOCKS), -1):
                if self._live(ids[e], sent.at_s):
                    self._keep(ids[e], sent.at_s, 0)  # a hit refreshes the entry
                    best = max(best, e)
                    break
        read = tokens[best] if best >= 0 else 0
        kept = [
            (m, sent.ttl_of(i))
            for i, m in enumerate(sent.marks)
            if tokens[m] >= self.rules.min_tokens
        ]
        for m, ttl in kept:
            self._keep(ids[m], sent.at_s, CACHE_TTLS[ttl])
        last = max((m for m, _ in kept), default=-1)
        lasting = max((m for m, ttl in kept if ttl != DEFAULT_TTL), default=-1)
        written = tokens[last] - read if last > best else 0
        long_written = tokens[lasting] - read if lasting > best else 0
        return Tally(read, written, total - read - written, long_written)


@dataclass
class OpenAICache:
    rules: CacheRules = field(default_factory=CacheRules)
    entries: dict[bytes, float] = field(default_factory=dict)  # prefix id -> last use

    def send(self, sent: Sent) -> Tally:
        ids, tokens = sent.ids, sent.sums
        total = tokens[-1] if tokens else 0
        common = 0
        for pid, t in zip(ids, tokens, strict=True):
            used = self.entries.get(pid)
            if used is None or sent.at_s - used > self.rules.ttl_s:
                break
            common = t
        for pid in ids:
            self.entries[pid] = sent.at_s
        read = openai_cached(common)
        return Tally(read, 0, total - read)


@dataclass
class IdealCache:
    previous: list[bytes] = field(default_factory=list)

    def send(self, sent: Sent) -> Tally:
        ids, tokens = sent.ids, sent.sums
        total = tokens[-1] if tokens else 0
        common = 0
        for a, b, t in zip(ids, self.previous, tokens, strict=False):
            if a != b:
                break
            common = t
        self.previous = ids
        return Tally(common, total - common, 0)
