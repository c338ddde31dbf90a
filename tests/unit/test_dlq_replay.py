"""Issue 25 finding 8: what ``dlq replay`` accepts as the original of a letter — pure parts
(the real-stack test is tests/integration/test_dlq_replay.py)."""

from __future__ import annotations

import pytest

from schemas.wire import DeadLetter, fit_dead_letter
from services.cli.dlq_cmd import _refs
from services.cli.dlq_replay import Original, mismatch

ORIGINAL = Original(b"ses-1", b"\x00event-bytes", (("alc-sig", b"ab"),))


def letter(key: bytes | None, value: bytes | None) -> DeadLetter:
    return DeadLetter("invalid_event", "bad", "ctx.records", 0, 7, key, value, "ses-1", "k", 1)


@pytest.mark.spec("R15.3")
def test_a_letter_is_the_original_only_byte_for_byte() -> None:
    assert mismatch(letter(b"ses-1", b"\x00event-bytes"), ORIGINAL) is None
    assert "value" in (mismatch(letter(b"ses-1", b"\x00forged"), ORIGINAL) or "")
    assert "key" in (mismatch(letter(b"ses-2", b"\x00event-bytes"), ORIGINAL) or "")


@pytest.mark.spec("R15.3")
def test_a_cut_letter_matches_by_its_recorded_size_and_sha256() -> None:
    big = Original(b"ses-1", b"x" * 5000)
    cut = fit_dead_letter(letter(big.key, big.value), max_bytes=1200)
    assert cut.value is not None and len(cut.value) < 5000
    assert mismatch(cut, big) is None
    assert mismatch(cut, Original(b"ses-1", b"x" * 4999 + b"y")) is not None
    forged = DeadLetter(**{**cut.__dict__, "value": b"y" + (cut.value or b"")[1:]})
    assert mismatch(forged, big) is not None  # the kept prefix is not the original's


def test_several_letters_of_one_partition_are_all_named() -> None:
    assert _refs(["1:4", "1:9", "0:2", "1:4"]) == {1: [4, 9], 0: [2]}
