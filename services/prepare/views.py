"""Materialised thread views, kept fresh incrementally from the record store.

A thread's view only grows (records are append-only and the inherited part is fixed by
the run's immutable snapshot), so each cached ``ThreadRenderer`` is fed only the records
committed since it last looked: one indexed query per prepare, no full re-render.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from domain.policy import LargeResultSettings
from domain.rendering import CountFn, ThreadRenderer
from schemas.errors import NotFound
from storage.threads import Snapshot, SummaryView, Threads

__all__ = ["Snapshot", "SummaryView", "ThreadViews"]


class ThreadViews:
    def __init__(self, threads: Threads, count: CountFn, capacity: int = 256) -> None:
        self.threads = threads
        self.count = count
        self.capacity = capacity
        self._views: OrderedDict[tuple[str, str, str], ThreadRenderer] = OrderedDict()
        self._locks: dict[tuple[str, str, str], asyncio.Lock] = {}
        self._epochs: dict[tuple[str, str, str], str] = {}
        # Snapshots are immutable (R2.1): cached without expiry. ``run_status`` in a cached
        # entry is the status when first read; callers needing it now pass fresh=True.
        self._snapshots: dict[tuple[str, str], Snapshot] = {}

    async def snapshot(self, session_id: str, run_id: str, fresh: bool = False) -> Snapshot:
        cached = self._snapshots.get((session_id, run_id))
        if cached is not None and not fresh:
            return cached
        snap = await self.threads.snapshot(session_id, run_id)
        if snap is None:
            raise NotFound(f"run {run_id} of session {session_id} not found")
        if len(self._snapshots) > 16 * self.capacity:
            self._snapshots.clear()
        self._snapshots[(session_id, run_id)] = snap
        return snap

    async def view(
        self,
        session_id: str,
        run_id: str,
        instance_id: str,
        message_overhead: int,
        summary: SummaryView | None = None,
        epoch: str = "",
        large: LargeResultSettings | None = None,
    ) -> tuple[ThreadRenderer, Snapshot]:
        """``epoch`` changes when a resource of the session is revoked or reactivated:
        rendered history may hold its content, so the view is rebuilt (R15.3)."""
        key = (session_id, run_id, instance_id)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            snap = await self.snapshot(session_id, run_id)
            rend = self._views.get(key)
            if rend is not None:
                self._views.move_to_end(key)  # in use: never the one evicted meanwhile
            summary_id = summary.summary_id if summary else None
            if (
                rend is None
                or rend.overhead != message_overhead
                or rend.summary_id != summary_id
                or self._epochs.get(key) != epoch
                or (large is not None and rend.large != large)
            ):
                # A new summary revision changes the view: rebuilt once, then incremental.
                rend = await self._rebuild(snap, instance_id, message_overhead, summary, large)
                self._views[key] = rend
                self._epochs[key] = epoch
            for rec in await self.threads.own(session_id, run_id, instance_id, rend.last_sequence):
                rend.feed(rec, inherited=False)
            self._views[key] = rend
            self._views.move_to_end(key)
            self._evict()
            return rend, snap

    async def _rebuild(
        self,
        snap: Snapshot,
        instance_id: str,
        message_overhead: int,
        summary: SummaryView | None,
        large: LargeResultSettings | None,
    ) -> ThreadRenderer:
        rend = ThreadRenderer(
            self.count,
            message_overhead,
            summary.covered if summary else frozenset(),
            summary.summary_id if summary else None,
            large,
        )
        if instance_id != snap.main_instance_id:
            # R13: a child sees only the background its parent exported (as material)
            # and its own thread — no inherited history.
            for rec in await self.threads.transferred(snap.session_id, snap.run_id, instance_id):
                rend.add_material(rec)
            if summary is not None:  # the child's own summary chain (R13.1)
                rend.add_summary(summary.text, summary.tokens)
        else:
            if summary is not None:
                rend.add_summary(summary.text, summary.tokens)
            for rec in await self.threads.inherited(snap.session_id, snap.through_session_sequence):
                rend.feed(rec, inherited=True)
            rend.seal_inherited()
        rend.last_sequence = snap.through_session_sequence
        return rend

    def _evict(self) -> None:
        while len(self._views) > self.capacity:
            old, _ = self._views.popitem(last=False)
            self._epochs.pop(old, None)
            lock_of_old = self._locks.get(old)
            if lock_of_old is not None and not lock_of_old.locked():
                # A lock in use stays: a waiter must find the same lock, or two
                # prepares could feed one renderer at once.
                del self._locks[old]
