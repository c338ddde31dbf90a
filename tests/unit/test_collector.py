"""Every service's young-generation threshold (``streams.tuning.collector``)."""

from __future__ import annotations

import ast
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from schemas.settings import Settings
from streams.tuning.collector import tune_collector


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


def test_the_young_generation_is_collected_after_the_configured_allocations_not_before(
    thresholds: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ALC_GC_YOUNG_THRESHOLD`` decides how many new containers a service allocates
    before a collection: none within it (with CPython's 700 there would be several), one
    once it is passed."""
    monkeypatch.setenv("ALC_GC_YOUNG_THRESHOLD", "5000")
    collections: list[int] = []

    def seen(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()  # every generation's count back to zero
    tune_collector(Settings().gc_young_threshold)
    gc.callbacks.append(seen)
    try:
        kept = [[] for _ in range(4_000)]  # within the threshold
        within = list(collections)
        kept += [[] for _ in range(2_000)]  # past it
    finally:
        gc.callbacks.remove(seen)
    assert len(kept) == 6_000
    assert within == []
    assert collections  # collected once the threshold was passed


ENTRY_POINTS = (
    "services/prepare/__main__.py",
    "services/compaction/__main__.py",
    "services/analytics/__main__.py",
    "streams/bootstrap.py",
    "streams/drivers/worker.py",
)


@pytest.mark.parametrize("path", ENTRY_POINTS)
def test_every_service_sets_the_threshold_from_its_settings_at_start(path: str) -> None:
    tree = ast.parse((Path(__file__).resolve().parents[2] / path).read_text("utf-8"))
    calls = [
        ast.unparse(n)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "tune_collector"
    ]
    assert calls == ["tune_collector(settings.gc_young_threshold)"], calls


def test_a_threshold_out_of_range_is_refused() -> None:
    for wrong in (10, 10**10):  # collected at every few objects; past a C int
        with pytest.raises(ValidationError):
            Settings(gc_young_threshold=wrong)
