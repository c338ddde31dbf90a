"""R18 observability notes of Prepare: per purpose, the input estimate and its itemized
shares, and the provider's real usage beside it — never content.

Advisory: published without waiting, from a task, so that a prepare never waits on the
broker (not even when the producer's buffer is full).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from domain.window.budget import BudgetReport
from schemas.wire import ObservabilityEvent, encode_observability
from storage.calls.model_calls import StoredCall, UsageRecord
from streams.kafka.publish import Publisher


@dataclass
class Notes:
    publisher: Publisher
    topic: str | None  # None: observability is off
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    def budget(
        self,
        scope: tuple[str, str, str],
        purpose: str,
        policy_revision: str,
        report: BudgetReport,
        refused: str | None = None,
        counts: dict[str, int] | None = None,
    ) -> None:
        """A prepare's estimate (``scope``: session, run, instance); ``refused``: the
        reason it was not sent (R18 over-limit refusals); ``counts``: its decisions by
        kind (kept, summarized, externalized, dropped, ...)."""
        if not self.topic:
            return
        sid, run_id, instance_id = scope
        ev = ObservabilityEvent(
            "prepare_budget",
            sid,
            run_id,
            instance_id,
            int(time.time() * 1000),
            policy_revision,
            purpose=purpose,
            decision="refused" if refused else None,
            reason=refused,
            budget_items=dict(report.items),
            counts=dict(counts or {}),
            input_budget=report.input_budget,
            estimated_input=report.estimated_input,
            counting_method=report.counting_method,
        )
        self._publish(sid, ev)

    def usage(self, call: StoredCall, usage: UsageRecord) -> None:
        """A model call's reported usage beside its estimate: its tokens by kind and, for
        a priced call, its exact cost (pico-units of ``currency``)."""
        if not self.topic:
            return
        ev = ObservabilityEvent(
            "model_call",
            call.session_id,
            call.run_id,
            call.instance_id,
            int(time.time() * 1000),
            call.dependency_versions.policy_revision,
            purpose=call.purpose,
            input_budget=call.budget.input_budget,
            estimated_input=int(call.budget.final_estimated_input or 0),
            counting_method=call.budget.counting_method,
            budget_items={
                k: int(v) for k, v in usage.items() if isinstance(v, int) and k.endswith("tokens")
            },
            cost_picos=_int_or_none(usage.get("cost_picos")),
            currency=usage.get("currency") if isinstance(usage.get("currency"), str) else None,
        )
        self._publish(call.session_id, ev)

    def readback(self, scope: tuple[str, str, str], record_id: str, offset: int, size: int) -> None:
        """R18: one read-back (``scope``: session, and the reading thread's run and
        instance, empty for a read on behalf of no thread): the record, the first
        character read and how many were returned — never the content."""
        if not self.topic:
            return
        sid, run_id, instance_id = scope
        ev = ObservabilityEvent(
            "readback",
            sid,
            run_id,
            instance_id,
            int(time.time() * 1000),
            "",
            record_id=record_id,
            read_offset=offset,
            read_size=size,
        )
        self._publish(sid, ev)

    def _publish(self, sid: str, ev: ObservabilityEvent) -> None:
        assert self.topic is not None
        task = asyncio.get_running_loop().create_task(
            self.publisher.send_advisory(self.topic, sid.encode(), encode_observability(ev))
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None
