"""``FakeThreads`` whose child threads have background: the records a parent exported to
each child (``storage.records.threads.PgThreads.transferred`` reads them from the child's
transfer rows), so a child's prepare can be tested on fakes (R13.2)."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.context.rendering import RecordView
from tests.unit.fakes.prepare import FakeThreads


@dataclass
class ExportingThreads(FakeThreads):
    # (session, run, child instance) -> the exported records, in session order
    exported: dict[tuple[str, str, str], list[RecordView]] = field(default_factory=dict)

    async def transferred(self, session_id: str, run_id: str, instance_id: str) -> list[RecordView]:
        return list(self.exported.get((session_id, run_id, instance_id), []))
