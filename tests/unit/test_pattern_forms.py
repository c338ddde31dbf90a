"""The extractive summarizer's patterns written for speed match exactly what their plain
forms match, on the real-transcripts corpus and on random strings made of what the
patterns turn on (R11.3: its features and signal lines, and so its drafts, do not change
with how a pattern is written). Pure.

- ``salience``'s numbers: the leading character class first, the look back after it;
  same spans, same order.
- ``signals.is_signal``: the shapes of a line's start matched there, the others searched
  only in a line that holds one of their words; the same lines.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

import pytest

from domain.compaction.extractive import feature_patterns as fp
from domain.compaction.extractive import signals

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks/corpus/real/transcripts.jsonl.gz"

# The plain forms: each alternative looks back first, then matches from its start.
PLAIN_MEASURE = re.compile(
    rf"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?\s?(?:{fp.UNITS})(?![\w])"
    r"|(?<![\w.])[-+]?\d+\.\d+(?![\w.])"
    r"|(?<![\w.])v?\d+(?:\.\d+){2,}(?![\w.])"
)
PLAIN_INTEGER = re.compile(r"(?<![\w.,/-])(?:\d{1,3}(?:,\d{3})+|\d{3,})(?![\w.,/])")
PAIRS = {"measure": (fp.MEASURE, PLAIN_MEASURE), "integer": (fp.INTEGER, PLAIN_INTEGER)}

# What the look-arounds and quantifiers of these patterns turn on: signs, "v", digits of
# two scripts, separators, letters of two scripts, unit words, spaces and line breaks.
PIECES = [*"0123456789", "٣", "-", "+", "v", "V", ".", ",", "/", "_", " ", "\n", "a", "x",
          "é", "ж", "ms", "s", "KiB", "tests", "%", "x", "1,234", "v3.11.4", "0.5"]  # fmt: skip


def _spans(pattern: re.Pattern[str], text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group(0)) for m in pattern.finditer(text)]


# ``signals.SIGNAL`` as one pattern searched in every line.
PLAIN_SIGNAL = re.compile(
    r"^E\s{2,}\S"
    r"|^(?:FAILED|ERROR|FAIL|PANIC)[\s:]"
    r"|^=+ .*\d.* =+$"
    r"|^_{3,} .+ _{3,}$"
    r"|^--- FAIL\b|^panic: |^fatal: |^npm ERR!"
    r"|^(?:\S+:\d+(?::\d+)?: )?(?:fatal )?error(?:\[\w+\])?:"
    r"|^Error: |^thread '.*' panicked at "
    r"|(?:^|[\s\[|])(?:ERROR|FATAL|CRITICAL)(?=[\s:\]|])"
    r"|: command not found$|: No such file or directory$"
    r"|\breturned non-zero exit status\b|^\[exit(?: code)? -?[1-9]\d*\]"
)
# Pieces of signal lines and of lines that only nearly are.
LINE_PIECES = ["E", "  ", " ", "FAILED", "FAIL", "ERROR", "FATAL", "CRITICAL", "PANIC", ":",
               "===", "___", "1 failed", "--- FAIL", "panic: ", "fatal: ", "npm ERR!", "x.py:3:",
               "error", "error[E0308]", "Error: ", "thread 'main' panicked at ", "[", "]", "|",
               ": command not found", ": No such file or directory", "[exit code 2]", "[exit 0]",
               "returned non-zero exit status", "exit code 3", "a", "é", "7"]  # fmt: skip


def _plain_is_signal(line: str) -> bool:
    return bool(
        signals.EXCEPTION.match(line)
        or PLAIN_SIGNAL.search(line)
        or signals.EXIT_NONZERO.search(line)
        or signals.TRACEBACK.match(line)
    )


def _corpus_texts() -> list[str]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        return [
            m["text"]
            for line in f
            for m in json.loads(line)["messages"]
            if isinstance(m.get("text"), str)
        ]


@pytest.mark.spec("R11.3")
@pytest.mark.parametrize("name", sorted(PAIRS))
def test_fast_patterns_match_their_plain_forms_on_real_transcripts(name: str) -> None:
    fast, plain = PAIRS[name]
    texts = _corpus_texts()
    found = 0
    for text in texts:
        expected = _spans(plain, text)
        assert _spans(fast, text) == expected, text[:200]
        found += len(expected)
    assert len(texts) > 1_000 and found > 300  # the corpus is read, and has such numbers


@pytest.mark.spec("R11.3")
@pytest.mark.parametrize("name", sorted(PAIRS))
def test_fast_patterns_match_their_plain_forms_on_random_strings(name: str) -> None:
    fast, plain = PAIRS[name]
    rng = random.Random(f"salience-{name}")
    found = 0
    for _ in range(20_000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 14)))
        expected = _spans(plain, text)
        assert _spans(fast, text) == expected, repr(text)
        found += len(expected)
    assert found > 500


@pytest.mark.spec("R11.3")
def test_signal_lines_are_the_lines_the_plain_pattern_finds() -> None:
    lines = [ln for text in _corpus_texts() for ln in text.splitlines()]
    rng = random.Random("signals")
    lines += ["".join(rng.choice(LINE_PIECES) for _ in range(rng.randrange(1, 6)))
              for _ in range(20_000)]  # fmt: skip
    signal = [ln for ln in lines if _plain_is_signal(ln)]
    assert [ln for ln in lines if signals.is_signal(ln)] == signal
    assert len(signal) > 2_000  # both kinds of line are there
