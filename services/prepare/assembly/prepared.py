"""Prepared contexts held for the gateway's final check (R10.5).

Prepare is stateless between calls: a prepared context is written to
PostgreSQL (storage/calls/prepared_contexts.py) before the prepare answers, so the model call
may reach any instance. The latest ones stay in process memory as a read-through cache:
the usual call, on the instance that prepared, costs no query.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import orjson
from tenacity import AsyncRetrying, retry_if_result, stop_after_delay, wait_exponential

from domain.prepared.deltas import Bases, Delta, Thread, base_age
from domain.window.budget import BudgetReport, Calibration, ModelProfile
from schemas.answers.prepared import Budget, DependencyVersions, ProtectedBlock
from storage.calls.prepared_contexts import PreparedContexts, PreparedRow

log = logging.getLogger(__name__)

# One statement of the writer holds at most this many contexts or bytes of their bodies,
# so a batch of large contexts holds back little behind it.
WRITE_ROWS = 64
WRITE_BYTES = 8 << 20


class WrittenOnce:
    """A context's messages as JSON, written at their first use — the answer or the
    stored context, whichever comes first — and shared by the other."""

    __slots__ = ("_json", "_messages")

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self._messages = messages
        self._json: bytes | None = None

    def __call__(self) -> bytes:
        if self._json is None:
            self._json = orjson.dumps(self._messages)
        return self._json


def budget_of(report: BudgetReport) -> Budget:
    """The budget report as answered (``calibration`` only once the model has one)."""
    return Budget.model_validate(report.to_dict())


@dataclass
class PreparedEntry:
    """What the gateway's final check needs of one prepared context (R10.5)."""

    prepared_id: str
    session_id: str
    run_id: str
    instance_id: str
    purpose: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    report: BudgetReport
    manifest: tuple[ProtectedBlock, ...]
    tool_schema_sha256: str
    profile: ModelProfile
    soft_ratio: float | None
    reprepare_of: str | None
    dependency_versions: DependencyVersions
    # "main" or the child instance id: the stored row's thread, not part of the context
    # (not in the body, not compared).
    lineage: str | None = field(default=None, compare=False)
    # ``messages``' JSON, shared with the answer (``WrittenOnce``): the stored form
    # splices it in instead of writing the messages again.
    messages_json: Callable[[], bytes] | None = field(default=None, compare=False)

    def to_json(self) -> bytes:
        """The stored form. Floats keep every digit (the gate recomputes the calibrated
        estimate from them and must decide as the preparing instance would)."""
        report = {f.name: getattr(self.report, f.name) for f in fields(BudgetReport)}
        report["items"] = dict(self.report.items)
        cal = self.report.calibration
        report["calibration"] = None if cal is None else [cal.factor, cal.samples, cal.last_drift]
        return orjson.dumps(
            {
                # The messages first: a thread's consecutive contexts share their
                # bodies' first bytes, and a large one is stored as the rest
                # (``domain.prepared.deltas``). Then the manifest (as long as the
                # thread), before what differs at every prepare (its id, its report): a
                # context prepared again with nothing new (a retry, a re-prepare) shares
                # all but those; a grown one shares its base's messages only.
                "messages": self.messages
                if self.messages_json is None
                else orjson.Fragment(self.messages_json()),
                # written by orjson as dataclasses (ProtectedBlock.to_dict's JSON, a
                # fourth of the time: thousands of blocks in a long thread's context)
                "manifest": self.manifest,
                "ids": [self.prepared_id, self.session_id, self.run_id, self.instance_id],
                "purpose": self.purpose,
                "tools": self.tools,
                "report": report,
                "tool_schema_sha256": self.tool_schema_sha256,
                "profile": {f.name: getattr(self.profile, f.name) for f in fields(ModelProfile)}
                # exact decimals as JSON (orjson writes no Decimal); read back by from_dict
                | {
                    "prices": None if self.profile.prices is None else self.profile.prices.to_dict()
                },
                "soft_ratio": self.soft_ratio,
                "reprepare_of": self.reprepare_of,
                "dependency_versions": self.dependency_versions.model_dump(),
            }
        )

    @staticmethod
    def from_json(data: bytes) -> PreparedEntry:
        d = orjson.loads(data)
        report = dict(d["report"])
        cal = report.pop("calibration")
        manifest = tuple(
            ProtectedBlock(**(p | {"source_ids": tuple(p["source_ids"])})) for p in d["manifest"]
        )
        prepared_id, session_id, run_id, instance_id = d["ids"]
        return PreparedEntry(
            prepared_id=prepared_id,
            session_id=session_id,
            run_id=run_id,
            instance_id=instance_id,
            purpose=d["purpose"],
            messages=d["messages"],
            tools=d["tools"],
            report=BudgetReport(**report, calibration=None if cal is None else Calibration(*cal)),
            manifest=manifest,
            tool_schema_sha256=d["tool_schema_sha256"],
            profile=ModelProfile(**d["profile"]),
            soft_ratio=d["soft_ratio"],
            reprepare_of=d["reprepare_of"],
            dependency_versions=DependencyVersions.model_validate(d["dependency_versions"]),
        )


class PreparedStore:
    """Every prepared context in PostgreSQL; the latest ``capacity`` also in memory (each
    holds its message list, pointers to shared message dicts, so the cache is bounded)."""

    def __init__(
        self,
        stored: PreparedContexts,
        capacity: int = 256,
        miss_wait_s: float = 2.0,
        retention_s: float = 24 * 3600.0,
    ) -> None:
        """``retention_s``: how long stored contexts are kept (pruning's), which bounds
        how old a base a delta may name (``domain.prepared.deltas.base_age``)."""
        self.stored = stored
        self.capacity = capacity
        self.miss_wait_s = miss_wait_s
        self._entries: OrderedDict[str, PreparedEntry] = OrderedDict()
        self._pending: list[PreparedEntry] = []  # remembered, not written yet
        self.bases = Bases(max_age_s=base_age(retention_s))  # what a large one names
        self._writer: asyncio.Task[None] | None = None

    async def remember(self, entry: PreparedEntry) -> None:
        """Kept in memory at once and written to PostgreSQL behind the answer: the write
        of a large context (all its messages) would otherwise sit on every prepare's
        latency, while the usual model call comes back to this instance and finds it in
        memory. Another instance that misses waits briefly for the write (``get``).
        One writer writes what was remembered while its last write was in flight in one
        statement: under load, one round trip stores many."""
        self._keep(entry)
        self._pending.append(entry)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        while self._pending:
            rows: list[PreparedRow] = []
            whole: list[tuple[Thread, PreparedRow]] = []  # stored whole: bases once stored
            size = 0
            now = time.monotonic()
            while self._pending and len(rows) < WRITE_ROWS and size < WRITE_BYTES:
                entry = self._pending.pop(0)
                thread = (entry.session_id, entry.run_id, entry.instance_id, entry.purpose)
                body = entry.to_json()
                # The entry stays in memory for the gateway; its JSON (as large as the
                # context) goes with the row and the answer.
                entry.messages_json = None
                row = _row(entry, body, self.bases.delta(thread, body, now))
                if row.base_id is None:
                    whole.append((thread, row))
                rows.append(row)
                size += len(row.body)
            stored = await self._save(rows)
            now = time.monotonic()
            for thread, row in whole:
                if row.prepared_id in stored:
                    self.bases.stored(thread, row.prepared_id, row.body, now)

    async def _save(self, rows: list[PreparedRow]) -> set[str]:
        """The ids of ``rows`` stored."""
        try:
            await self.stored.save_many(rows)
            return {row.prepared_id for row in rows}
        except Exception:  # one row alone, so that one bad row loses only itself
            log.warning("prepared contexts written together failed; one by one")
            return {row.prepared_id for row in rows if await self._write_one(row)}

    async def _write_one(self, row: PreparedRow) -> bool:
        try:
            await self.stored.save_many([row])
            return True
        except Exception:  # the context stays usable here; another instance re-prepares
            log.exception("prepared context %s not stored", row.prepared_id)
            return False

    async def flush(self) -> None:
        """Wait for every write in flight (shutdown; tests)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.wait([self._writer])

    async def get(self, prepared_id: str) -> PreparedEntry | None:
        entry = self._entries.get(prepared_id)
        if entry is not None:
            return entry
        row = None
        async for attempt in AsyncRetrying(
            retry=retry_if_result(lambda found: found is None),
            stop=stop_after_delay(self.miss_wait_s),
            wait=wait_exponential(multiplier=0.02, max=0.25),
            retry_error_callback=lambda _state: None,
        ):
            with attempt:
                # the preparing instance may still be writing it (``remember``).
                row = await self.stored.load(prepared_id)
            outcome = attempt.retry_state.outcome
            if outcome is not None and not outcome.failed:
                attempt.retry_state.set_result(row)
        if row is None:
            return None
        entry = PreparedEntry.from_json(row.body)
        self._keep(entry)
        return entry

    def _keep(self, entry: PreparedEntry) -> None:
        self._entries[entry.prepared_id] = entry
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)


def _row(entry: PreparedEntry, body: bytes, delta: Delta | None) -> PreparedRow:
    """``entry``'s row: its body whole, or what follows its base's first bytes."""
    if delta is None:
        return PreparedRow(
            entry.prepared_id, entry.session_id, entry.run_id, body, entry.purpose, entry.lineage
        )
    return PreparedRow(
        entry.prepared_id,
        entry.session_id,
        entry.run_id,
        body[delta.shared :],
        entry.purpose,
        entry.lineage,
        delta.base_id,
        delta.shared,
    )
