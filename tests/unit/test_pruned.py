"""Feature patterns matched with only the alternatives a text can hold
(``domain.compaction.extractive.pruned``) find exactly what the whole patterns find."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.compaction.extractive import feature_patterns as fp
from domain.compaction.extractive import signals
from domain.compaction.extractive.pruned import Alt, Pruned

# The patterns as they were written whole, before they were split into alternatives.
WHOLE = {
    "PATH": (
        fp.PATH,
        r"(?<![\w:/.~-])(?:(?:~|\.{1,2})?/(?:[\w.-]+/)+[\w.-]+"
        r"|(?:[\w-][\w.-]*/)+[\w-][\w-]*\.[^\W_]{1,8}"
        r"|[\w-]+\.(?:py|pyi|md|rst|toml|ya?ml|json|ts|tsx|js|jsx|go|rs|java|kt|c|h|cc|cpp|hpp"
        r"|rb|php|sql|cfg|ini|txt|sh|lock|proto|tf|csv|log|html|css))(?![\w/.-])",
    ),
    "IDENT": (
        fp.IDENT,
        r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"
        r"|\b[A-Z][A-Z0-9]{1,9}-\d{1,7}\b"
        r"|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b"
        r"|\b[A-Z]{1,5}\d{3,6}\b"
        r"|\b[^\W\d_A-Z]\w*[-_][^\W_]*\d\w*\b",
    ),
    "ERROR_NAMES": (
        fp.ERROR_NAMES,
        r"'([^'\n]{2,60})'|\"([^\"\n]{2,60})\"|\b(\w+(?:Error|Exception))\b",
    ),
    "CODE_NAME": (
        fp.CODE_NAME,
        r"\b[^\W\d_A-Z][^\W_A-Z]*(?:_[^\W_A-Z]+)+\b|\b[A-Z][^\W_A-Z]+(?:[A-Z][^\W_A-Z]+)+\b",
    ),
    "ERROR_SHAPE": (
        signals.ERROR_SHAPE,
        r"\b\w+(?:Error|Exception)\b|\bHTTP(?:/\d(?:\.\d)?)?[ :]+[45]\d\d\b",
    ),
}

# Pieces that make each alternative match, and the characters their needs are about.
PIECES = [
    "src/app/main.py", "./run.sh", "~/x/y", "setup.py", "ci.yml", "a/b", "and/or", "http://h/a.html",
    "3f9a2c1d", "deadbeef42", "PAY-4821", "ORA-00942", "LEDGER_SYNC_TIMEOUT", "E4127",
    "acct_81a2", "req-77f", "KeyError", "ValueError:", "IOException", "HTTP 503", "HTTP/1.1 404",
    "'currency_code'", '"name"', "snake_case_name", "CamelCase", "HTTPServer", "x", "7", "-",
    "_", ".", "/", "'", '"', "A", "Error", "données_été", "数据_表", "٣٤٥", "v1.2.3", "0.973",
]  # fmt: skip
texts = st.lists(
    st.one_of(st.sampled_from(PIECES), st.text(alphabet="aZ09_-./'\" \n:é٣", max_size=6)),
    max_size=12,
).map(lambda parts: " ".join(parts))


def found(pattern: re.Pattern[str] | Pruned, text: str) -> list[tuple[tuple[int, int], str]]:
    """Each match's span and what it names (its first group that took part, or itself)."""
    out = []
    for m in pattern.finditer(text):
        out.append((m.span(), next((g for g in m.groups() if g), m.group(0))))
    return out


@pytest.mark.parametrize("name", sorted(WHOLE))
def test_the_whole_pattern_is_the_one_written_whole(name: str) -> None:
    pruned, whole = WHOLE[name]
    assert isinstance(pruned, Pruned)
    probe = " ".join(PIECES)
    assert found(pruned.pattern, probe) == found(re.compile(whole), probe)
    assert found(pruned, probe), "the probe must exercise the pattern"


@settings(max_examples=400, deadline=None)
@given(texts)
def test_a_pruned_pattern_finds_exactly_what_the_whole_pattern_finds(text: str) -> None:
    for pruned, whole in WHOLE.values():
        assert isinstance(pruned, Pruned)
        assert found(pruned, text) == found(re.compile(whole), text), (whole, text)
        assert (pruned.search(text) is None) == (re.search(whole, text) is None)


def test_a_text_without_an_alternatives_characters_is_matched_without_it() -> None:
    p = Pruned([Alt(r"\d+", (r"\d",)), Alt(r"[A-Z]+", ("[A-Z]",))])
    assert p.for_text("no capitals 42") == re.compile(r"(?:\d+)")
    assert p.for_text("nothing here") is None
    assert list(p.finditer("nothing here")) == []
    assert p.search("ABC 7") is not None and p.search("abc") is None
