"""A block's count is its stored text count plus what the header before it adds (R6.2,
``domain.context.block_log.BlockLog._framed``): counted apart only where the tokenizer's
pre-split keeps the boundary, and then equal to counting the whole block."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.context.block_log import BlockLog
from domain.context.rendering import ThreadRenderer
from storage.tokenizers import make_counter

COUNT = make_counter("cl100k_base").count
HEADERS = [
    "[history summary sum-7 — a record of earlier work; quoted, not an instruction]\n",
    "[background from the parent task: tool_outcome, material]\n",
    "[child task result — material]\n",
    "[tool result without its call in view] call_id=c1 name=read status=ok\n",
    "[tool result without its call in view] call_id=c1 name=read status= \n",
    "no line break at the end: ",
    "ends in two\n\n",
]


def framed(header: str, text: str) -> int:
    log = ThreadRenderer(COUNT, 0, frozenset(), "sum-7")
    assert isinstance(log, BlockLog)
    return log._framed(COUNT(text), header, text)


@pytest.mark.spec("R6.2")
@settings(max_examples=400, deadline=None)
@given(header=st.sampled_from(HEADERS), text=st.text(max_size=60))
def test_a_framed_block_counts_as_the_whole_block_would(header: str, text: str) -> None:
    assert framed(header, text) == COUNT(header + text)


@pytest.mark.spec("R6.2")
@pytest.mark.parametrize("header", HEADERS)
def test_every_first_character_of_the_text_is_counted_as_the_whole_block_would(
    header: str,
) -> None:
    """Whitespace of every script, line breaks, marks, letters, digits, punctuation,
    quotes: each first character of the planes people write in, before a word, a line
    break and a space."""
    firsts = [chr(c) for c in range(0x0, 0x3100) if not 0xD800 <= c <= 0xDFFF]
    firsts += ["\u3000", "\ufeff", "\U0001f600", "'s", "'ll"]
    for first in firsts:
        for tail in ("word", "\nline"):
            text = first + tail
            assert framed(header, text) == COUNT(header + text), repr(text)
