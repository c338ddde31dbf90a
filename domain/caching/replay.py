"""A session's requests replayed through a provider's prompt cache (``domain.caching.rules``).
Pure: a cache is a plain object fed the requests in the order they were sent, each with
the second it was sent at; it answers what that request read from the cache, wrote to
it, and paid as fresh input.

- ``AnthropicCache``: entries exist only where an earlier request put a mark on a prefix
  of at least the model's minimum; a mark reads the longest live entry at its block or
  up to ``LOOKBACK_BLOCKS - 1`` blocks before it; the request writes from there to its
  last mark (at the TTL's write premium); what follows the last mark is fresh. An entry
  lives ``ttl`` seconds from its last write or read.
- ``OpenAICache``: every request's prefix is cached; a request reads the longest live
  prefix it shares with an earlier one, in the provider's steps (none under 1,024 tokens,
  then 128-token steps); the rest is fresh (no write premium).
- ``IdealCache``: the longest prefix in common with the previous request, whatever its
  length or age; the rest is written — the bound the real rules are compared with.

Blocks are compared by ``key`` (equal keys: equal content), prefixes by a chained digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from domain.caching.rules import (
    LOOKBACK_BLOCKS,
    OPENAI_IDLE_S,
    CacheRules,
    openai_cached,
)


@dataclass(frozen=True)
class Block:
    """One cacheable unit of a request: a tool, a system block, a message's content block."""

    key: str
    tokens: int


@dataclass(frozen=True)
class Sent:
    """A request as a cache sees it: its blocks in cache order, the positions of its
    marks (Anthropic) and when it was sent (seconds)."""

    blocks: Sequence[Block]
    marks: tuple[int, ...] = ()
    at_s: float = 0.0


@dataclass(frozen=True)
class Tally:
    """One request's input tokens by what the cache did with them (disjoint)."""

    read: int = 0
    written: int = 0
    fresh: int = 0

    @property
    def total(self) -> int:
        return self.read + self.written + self.fresh

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.read + other.read, self.written + other.written, self.fresh + other.fresh)


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
    entries: dict[bytes, float] = field(default_factory=dict)  # prefix id -> last use

    def _live(self, pid: bytes, at: float) -> bool:
        used = self.entries.get(pid)
        return used is not None and at - used <= self.rules.ttl_s

    def send(self, sent: Sent) -> Tally:
        ids, tokens = prefix_ids(sent.blocks), prefix_tokens(sent.blocks)
        total = tokens[-1] if tokens else 0
        best = -1
        for m in sent.marks:
            for e in range(m, max(-1, m - LOOKBACK_BLOCKS), -1):
                if self._live(ids[e], sent.at_s):
                    self.entries[ids[e]] = sent.at_s  # a hit refreshes the entry
                    best = max(best, e)
                    break
        read = tokens[best] if best >= 0 else 0
        cached = [m for m in sent.marks if tokens[m] >= self.rules.min_tokens]
        for m in cached:
            self.entries[ids[m]] = sent.at_s
        last = max(cached, default=-1)
        written = tokens[last] - read if last > best else 0
        return Tally(read, written, total - read - written)


@dataclass
class OpenAICache:
    idle_s: float = OPENAI_IDLE_S
    entries: dict[bytes, float] = field(default_factory=dict)  # prefix id -> last use

    def send(self, sent: Sent) -> Tally:
        ids, tokens = prefix_ids(sent.blocks), prefix_tokens(sent.blocks)
        total = tokens[-1] if tokens else 0
        common = 0
        for pid, t in zip(ids, tokens, strict=True):
            used = self.entries.get(pid)
            if used is None or sent.at_s - used > self.idle_s:
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
        ids, tokens = prefix_ids(sent.blocks), prefix_tokens(sent.blocks)
        total = tokens[-1] if tokens else 0
        common = 0
        for a, b, t in zip(ids, self.previous, tokens, strict=False):
            if a != b:
                break
            common = t
        self.previous = ids
        return Tally(common, total - common, 0)
