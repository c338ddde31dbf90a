"""``segmentation.width`` counted in C for a text whose only characters beyond ASCII are
marks and spaces (a summary's "…", "→", "—"): the same estimate as piece by piece."""

from __future__ import annotations

import random

import pytest

from domain.compaction.extractive import segmentation as seg

ASCII = "abcdefghij KLMNOP 0123456789 _-./:()[]{}=+*'\"\n\t"
# marks and spaces only (an en dash, curly quotes, a full-width comma...): no letter, no digit
BEYOND = "…→—\u2013·•«»“”\u2018\u2019、\uff0c。\u00a0\u2009"


def _texts(seed: int, n: int = 300) -> list[str]:
    rng = random.Random(seed)
    alphabet = ASCII + BEYOND
    return ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 120))) for _ in range(n)]


@pytest.mark.spec("R11.2")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_marks_beyond_ascii_are_counted_in_c_as_piece_by_piece(seed: int) -> None:
    for text in _texts(seed):
        assert seg.width(text) == seg._width_by_piece(text), text


@pytest.mark.spec("R11.2")
def test_a_word_beyond_ascii_is_counted_piece_by_piece() -> None:
    """A letter or digit beyond ASCII makes the text's ASCII words names and code
    (``_tokens``' ``foreign``): not the ASCII count plus its marks."""
    for text in ("run → готово", "step 3 … ٣", "café — done", "任务 → ok"):
        assert seg.width(text) == seg._width_by_piece(text)


@pytest.mark.spec("R11.2")
@pytest.mark.parametrize("seed", [4, 5, 6])
def test_the_width_of_joined_lines_is_summed_from_each_lines_counts(seed: int) -> None:
    """``width_joined`` adds up its parts' counts: the same estimate as the joined text,
    parts that start with a mark (a bullet after the line break) and parts with words
    beyond ASCII included."""
    rng = random.Random(seed)
    texts = [*_texts(seed), "", "- a bullet", "## Title", "_x", "ok → 任务", "étape 2"]
    for _ in range(300):
        parts = [rng.choice(texts) for _ in range(rng.randrange(0, 8))]
        assert seg.width_joined(parts) == seg.width("\n".join(parts)), parts
