"""The records a compaction job sees, cached per thread between jobs.

A thread's view only grows (the inherited part is fixed by the run's snapshot), so the
view read for one job is extended with the records committed since, instead of being
read again. A revocation rewrites past records (withdrawn content, R15.3), so a cached
view read before one is never reused.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.rendering import RecordView
from schemas.wire import CompactionRequest
from storage.compaction_jobs import CompactionJobs

THREAD_CACHE = 64  # threads whose views stay cached between jobs


@dataclass(frozen=True)
class _Cached:
    records: list[RecordView]
    seen: int  # the watermark the records were read up to
    epoch: str  # the session's revocation epoch when they were read


class ThreadViews:
    def __init__(self, jobs: CompactionJobs, capacity: int = THREAD_CACHE) -> None:
        self.jobs = jobs
        self.capacity = capacity
        # (session, run, instance) -> view; insertion order doubles as LRU order.
        self._threads: dict[tuple[str, str, str], _Cached] = {}

    async def view(self, req: CompactionRequest) -> list[RecordView]:
        """The job's view up to its watermark, in session order."""
        key = (req.session_id, req.run_id, req.instance_id)
        cached = self._threads.pop(key, None)
        epoch = await self.jobs.revocation_epoch(req.session_id)
        if cached is None or cached.seen > req.view_watermark or cached.epoch != epoch:
            inherited, through = await self.jobs.inherited_view(*key)
            cached = _Cached(inherited, through, epoch)
        records = cached.records + await self.jobs.thread_view(
            *key, cached.seen, req.view_watermark
        )
        self._threads[key] = _Cached(records, req.view_watermark, epoch)
        while len(self._threads) > self.capacity:
            self._threads.pop(next(iter(self._threads)))
        return records
