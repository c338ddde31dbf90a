"""Counts summed from parts, where the tokenizer's pre-split keeps the boundary between
them (after a line break, before a visible character), equal to counting the whole
(R6.2): a block's count is its stored text count plus what its header adds
(``domain.context.block_log.BlockLog._framed``), and a summary's count is its lines'
(``domain.context.tokens.CachedCounter.count_lines``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.context.block_log import BlockLog
from domain.context.rendering import ThreadRenderer
from domain.context.tokens import CachedCounter
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
@pytest.mark.parametrize("header", HEADERS[:4])
def test_every_first_character_of_the_text_is_counted_as_the_whole_block_would(
    header: str,
) -> None:
    """The renderer's header shapes before each first character of the planes people
    write in (whitespace of every script, line breaks, marks, letters, digits,
    punctuation, quotes), followed by a word or a line break."""
    firsts = [chr(c) for c in range(0x0, 0x3100) if not 0xD800 <= c <= 0xDFFF]
    firsts += ["\u3000", "\ufeff", "\U0001f600", "'s", "'ll"]
    for n, first in enumerate(firsts):
        text = first + ("word", "\nline")[n % 2]
        assert framed(header, text) == COUNT(header + text), repr(text)


# Line breaks of every kind, spaces before and after them, marks, digits, words, scripts.
_TEXT = st.lists(
    st.sampled_from(
        [
            *"\n\n\n\r\t  -#*[]().:/'\"0123456789",
            "ab",
            "Word",
            "x",
            "\u00e9t\u00e9",
            "\u4e2d\u6587",
            "\u2014",
            "\u2026",
            "\u00a0",
            "\u3000",
            "\U0001f600",
            "'s",
        ]
    ),
    max_size=40,
).map("".join)


@pytest.mark.spec("R6.2")
@settings(max_examples=500, deadline=None)
@given(texts=st.lists(_TEXT, min_size=1, max_size=4))
def test_a_text_counted_line_by_line_counts_as_the_whole_text_would(texts: list[str]) -> None:
    """The same counter asked again with texts that share lines (a summary as a job
    changes a few of them) answers each as encoding it whole would."""
    counter = CachedCounter(make_counter("cl100k_base"), capacity=8)
    for text in [*texts, *texts]:
        assert counter.count_lines(text) == COUNT(text), repr(text)


@pytest.mark.spec("R6.2")
def test_a_summary_is_counted_by_its_lines_as_a_whole() -> None:
    summary = (
        "## Verified facts\n- the user asked for a refund [rec:r1]\n"
        '- read_file(path="src/app.py") → 120 lines [rec:r2]\n\n'
        "## Failures\n  - KeyError: 'currency_code' [rec:r3]\n\r\n"
        "## 未解决的问题\n- 要不要回滚\uff1f [rec:r4]\n/tmp/out.log\n"
    )
    counter = CachedCounter(make_counter("cl100k_base"))
    assert counter.count_lines(summary) == COUNT(summary)
    assert counter.count_lines(summary + "- one more [rec:r5]\n") == COUNT(
        summary + "- one more [rec:r5]\n"
    )
