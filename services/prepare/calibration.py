"""Each model's calibration as Prepare reads it (R6.4, issue 13): from PostgreSQL, where
every instance's usage reports fold in (storage/calibration.py), cached for a short
``ttl_s`` so a prepare does not query it every time. A report this instance folded in is
used at once; another instance's within ``ttl_s``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from domain.budget import Calibration
from storage.calibration import Calibrations

DEFAULT_TTL_S = 5.0


@dataclass
class CalibrationCache:
    stored: Calibrations
    ttl_s: float = DEFAULT_TTL_S
    clock: Callable[[], float] = time.monotonic
    _entries: dict[str, tuple[float, Calibration | None]] = field(default_factory=dict)

    async def get(self, model: str) -> Calibration | None:
        now = self.clock()
        hit = self._entries.get(model)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        cal = await self.stored.get(model)
        self._entries[model] = (now, cal)
        return cal

    def put(self, model: str, cal: Calibration) -> None:
        """What a report on this instance folded in: fresher than the cached value."""
        self._entries[model] = (self.clock(), cal)
