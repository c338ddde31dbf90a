"""Each space's calibration of each model as Prepare reads it (R6.4, issues 13 and 25):
from PostgreSQL, where every instance's usage reports fold in (storage/calibration.py),
cached for a short ``ttl_s`` so a prepare does not query it every time. A report this
instance folded in is used at once; another instance's within ``ttl_s``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from domain.window.budget import Calibration
from storage.calibration import Calibrations

DEFAULT_TTL_S = 5.0


@dataclass
class CalibrationCache:
    stored: Calibrations
    ttl_s: float = DEFAULT_TTL_S
    clock: Callable[[], float] = time.monotonic
    # (space_id, model) -> (read at, calibration): a space's reports never reach another's
    # estimates, not even through this cache.
    _entries: dict[tuple[str, str], tuple[float, Calibration | None]] = field(default_factory=dict)

    async def get(self, space_id: str, model: str) -> Calibration | None:
        now = self.clock()
        hit = self._entries.get((space_id, model))
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        cal = await self.stored.get(space_id, model)
        self._entries[(space_id, model)] = (now, cal)
        return cal

    def put(self, space_id: str, model: str, cal: Calibration) -> None:
        """What a report on this instance folded in: fresher than the cached value."""
        self._entries[(space_id, model)] = (self.clock(), cal)
