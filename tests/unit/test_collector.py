"""Every service's young-generation threshold (``streams.collector``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from schemas.settings import Settings
from streams.collector import tune_collector


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def test_the_young_threshold_is_set_and_the_older_ratios_kept(
    thresholds: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ALC_GC_YOUNG_THRESHOLD", raising=False)  # the default
    tune_collector(Settings().gc_young_threshold)
    assert gc.get_threshold() == (20_000, thresholds[1], thresholds[2])


def test_a_threshold_out_of_range_is_refused() -> None:
    for wrong in (10, 10**10):  # collected at every few objects; past a C int
        with pytest.raises(ValidationError):
            Settings(gc_young_threshold=wrong)
