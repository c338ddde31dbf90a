"""Token counting (R6.4): the model's real tokenizer when configured, else a labelled
conservative estimate. Characters are never counted as tokens.

Counts are computed once per content hash and cached; budget arithmetic then only adds
cached integers (DESIGN.md, Tokens). Pure: a tokenizer's files are read at the edge
(``storage.tokenizers``), which hands the loaded encoding in.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Collection
from typing import Protocol

ESTIMATE_METHOD = "estimate:utf8_bytes"


class TokenCounter(Protocol):
    method: str

    def count(self, text: str) -> int: ...


class Encoding(Protocol):
    """A tokenizer's encoding, loaded at the edge (``storage.tokenizers``)."""

    def encode(self, text: str, *, disallowed_special: Collection[str] = ...) -> list[int]: ...


class EncodingCounter:
    """Counts with a loaded encoding; ``method`` names it in every budget report."""

    def __init__(self, encoding: Encoding, method: str) -> None:
        self._enc = encoding
        self.method = method

    def count(self, text: str) -> int:
        # disallowed_special=() : user text containing "<|endoftext|>" is text, not a
        # control token, and must not raise.
        return len(self._enc.encode(text, disallowed_special=()))


class ByteEstimateCounter:
    """Every BPE token covers at least one UTF-8 byte, so the byte count is an upper
    bound: conservative, and labelled as an estimate in every budget report."""

    method = ESTIMATE_METHOD

    def count(self, text: str) -> int:
        return len(text.encode("utf-8"))


# Where a text's count is the sum of its parts' counts: after a line break, before a
# visible character. The counters here (cl100k_base's pre-split pattern, whatever the
# ranks; the byte estimate) never join a line break to a following word, number or mark
# in one piece, so no token crosses there (tests/unit/test_counted_by_parts.py).
LINE_START = re.compile(r"(?<=\n)(?=\S)")


class CachedCounter:
    """LRU cache keyed by content hash, so a redelivered or repeated body is not re-encoded."""

    def __init__(self, inner: TokenCounter, capacity: int = 65536) -> None:
        self.inner = inner
        self.method = inner.method
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._capacity = capacity
        self._lines: OrderedDict[str, int] = OrderedDict()  # ``count_lines``'
        self.hits = 0
        self.misses = 0

    def count(self, text: str) -> int:
        return self.inner.count(text)

    def count_lines(self, text: str) -> int:
        """``count(text)``, summed from its lines' counts, each line encoded once while
        kept: for a text counted again and again as a few of its lines change (a summary
        as a job merges, bounds and fits it). The same number: see ``LINE_START``."""
        total = 0
        for line in LINE_START.split(text):
            n = self._lines.get(line)
            if n is None:
                n = self._lines[line] = self.inner.count(line)
                if len(self._lines) > self._capacity:
                    self._lines.popitem(last=False)
            else:
                self._lines.move_to_end(line)
            total += n
        return total

    def count_keyed(self, key: str, text: str) -> int:
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            self.hits += 1
            return cached
        self.misses += 1
        n = self.inner.count(text)
        self._cache[key] = n
        if len(self._cache) > self._capacity:
            self._cache.popitem(last=False)
        return n
