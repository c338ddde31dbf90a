"""Materialised thread views, kept fresh incrementally from the record store.

A thread's view only grows (records are append-only and the inherited part is fixed by
the run's immutable snapshot), so each cached ``ThreadRenderer`` is fed only the records
committed since it last looked: one indexed query per prepare, no full re-render.

A view not in memory (after a restart, a new summary or revocation, on another instance)
continues from its stored render state when there is one (cold prepare), and
the state is stored again after a full render and whenever the view has grown by a tenth
since it was last stored — so a cold prepare reads one row and renders only what is new.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from domain.context import render_state, state_packing
from domain.context.rendering import CountFn, RecordView, ThreadRenderer
from domain.frontier import Frontier
from domain.policy.context_policy import LargeResultSettings
from domain.policy.sections import ChildTransferPolicy
from schemas.errors import NotFound
from services.prepare.assembly.history import Histories
from services.prepare.assembly.task_counts import TaskCounts
from storage.calls.render_states import RenderStates, StoredState
from storage.compaction.read_ahead import ReadAhead, ReadAheads
from storage.records.frontier import FrontierReads
from storage.records.thread_frontier import FrontierQuery, ThreadFrontierReads
from storage.records.threads import Snapshot, SummaryView, Threads

log = logging.getLogger(__name__)
# A stored state is refreshed once the view grew by this share of its records (and at
# least SAVE_MIN records): a cold prepare then renders at most about that much.
SAVE_SHARE = 10
SAVE_MIN = 64

__all__ = ["Snapshot", "SummaryView", "ThreadViews", "built_to_keep"]


@contextmanager
def built_to_keep() -> Iterator[None]:
    """What Prepare's startup hands to ``render_state.load`` (``services.prepare.bootstrap``).
    Loading allocates a few objects per record and frees none: the cyclic collector
    would scan the growing heap again and again for nothing (a fifth of a cold load), so
    it is paused. What was built is then promoted straight to the oldest generation
    (freeze, then unfreeze: two list splices, no scan) instead of being scanned by the
    young collections that would follow (another fifth). Garbage cycles promoted with it
    are still collected, by the next full collection."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if paused:
            gc.enable()


class ThreadViews:
    """``states`` (optional) stores render states, of views of at least ``store_min``
    records (a smaller one renders in full quickly); ``counting`` names the counting
    method behind ``count``, part of what a stored state must match; ``building`` is
    entered around a stored state's load (``built_to_keep``: the collector paused). A
    new run's main view is continued from the session's inherited history kept in
    memory (``history.Histories``) when one serves."""

    def __init__(
        self,
        threads: Threads,
        count: CountFn,
        capacity: int = 256,
        states: RenderStates | None = None,
        counting: str = "",
        building: render_state.Building = nullcontext,
        store_min: int = 0,
        frontier: ThreadFrontierReads | None = None,
        read_aheads: ReadAheads | None = None,
    ) -> None:
        self.threads = threads
        self.frontier = frontier
        self.read_aheads = read_aheads
        self.store_min = store_min
        self.histories = Histories(capacity)
        self.building = building
        self.count = count
        self.capacity = capacity
        self.states = states
        self.counting = counting
        self._saved: dict[tuple[str, str, str], int] = {}  # last_sequence stored, per view
        self._saving: set[asyncio.Task[None]] = set()
        self._views: OrderedDict[tuple[str, str, str], ThreadRenderer] = OrderedDict()
        self._locks: dict[tuple[str, str, str], asyncio.Lock] = {}
        self._epochs: dict[tuple[str, str, str], str] = {}
        # Snapshots are immutable (R2.1): cached without expiry. ``run_status`` in a cached
        # entry is the status when first read; callers needing it now pass fresh=True.
        self._snapshots: dict[tuple[str, str], Snapshot] = {}
        self._tasks = TaskCounts(16 * capacity)

    async def snapshot(self, session_id: str, run_id: str, fresh: bool = False) -> Snapshot:
        cached = self._snapshots.get((session_id, run_id))
        if cached is not None and not fresh:
            return cached
        snap = await self.threads.snapshot(session_id, run_id)
        if snap is None:
            raise NotFound(f"run {run_id} of session {session_id} not found")
        self.remember(snap)
        return snap

    def remember(self, snap: Snapshot) -> None:
        """Cache a run's snapshot read elsewhere (a run's start reads it)."""
        if len(self._snapshots) > 16 * self.capacity:
            self._snapshots.clear()
        self._snapshots[(snap.session_id, snap.run_id)] = snap

    async def view(
        self,
        session_id: str,
        run_id: str,
        instance_id: str,
        message_overhead: int,
        summary: SummaryView | None = None,
        epoch: str = "",
        large: LargeResultSettings | None = None,
        transfer: ChildTransferPolicy | None = None,
    ) -> tuple[ThreadRenderer, Snapshot]:
        """``epoch`` changes when a resource of the session is revoked or reactivated:
        rendered history may hold its content, so the view is rebuilt (R15.3).
        ``transfer``: the release's child_transfer_policy (None: no limits, R13.2)."""
        rend, snap, _ = await self.view_at(
            session_id, run_id, instance_id, message_overhead, summary, epoch, large, transfer
        )
        return rend, snap

    async def view_and_frontier(
        self,
        scope: tuple[str, str, str],
        frontier: FrontierReads,
        query: FrontierQuery,
        message_overhead: int,
        summary: SummaryView | None = None,
        epoch: str = "",
        large: LargeResultSettings | None = None,
        transfer: ChildTransferPolicy | None = None,
        ahead: ReadAhead | None = None,
    ) -> tuple[ThreadRenderer, Snapshot, Frontier]:
        """``view``, and the thread's frontier (R4.4) as committed now: read with the
        view's new records when ``frontier`` of the constructor is given, else from
        ``frontier`` here after the view; ``ahead``: both, read by ``ahead``."""
        sid, run_id, instance_id = scope
        rend, snap, found = await self.view_at(
            sid, run_id, instance_id, message_overhead, summary, epoch, large, transfer, query,
            ahead,
        )  # fmt: skip
        if found is None:
            found = await frontier.read(
                *scope, child=query.child, inherit_constraints=query.inherit_constraints
            )
        return rend, snap, found

    async def view_at(
        self,
        session_id: str,
        run_id: str,
        instance_id: str,
        message_overhead: int,
        summary: SummaryView | None = None,
        epoch: str = "",
        large: LargeResultSettings | None = None,
        transfer: ChildTransferPolicy | None = None,
        query: FrontierQuery | None = None,
        ahead: ReadAhead | None = None,
    ) -> tuple[ThreadRenderer, Snapshot, Frontier | None]:
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
                or (transfer is not None and rend.transfer != transfer)
            ):
                # A new summary revision changes the view: rebuilt once (or continued from
                # the session's history or its stored state), then incremental.
                settings = (large or LargeResultSettings(), self.counting, transfer)
                # A state found under it was built with exactly these settings; ``base``:
                # the same without the summary (a kept history under another may serve).
                fp = render_state.fingerprint(message_overhead, summary_id, epoch, *settings)
                base = render_state.fingerprint(message_overhead, None, epoch, *settings)
                rend = await self._continued(snap, instance_id, (fp, base), summary)
                if rend is None:
                    rend = await self._restore(key, fp, summary)
                if rend is None:
                    rend = await self._rebuild(
                        snap, instance_id, message_overhead, summary, large, transfer, (fp, base)
                    )
                self._views[key] = rend
                self._epochs[key] = epoch
            found = await self._feed(key, rend, query, ahead)
            self._store(key, epoch, rend)
            self._views[key] = rend
            self._views.move_to_end(key)
            self._evict()
            return rend, snap, found

    async def ahead(self, scope: tuple[str, str, str], query: FrontierQuery) -> ReadAhead | None:
        """A kept main view's new records and frontier, with the main view's compaction
        row, in one round trip, read before the prepare decides on its summary (which
        the row gives); ``view_at`` uses them when the view still stands where they were
        read from. None without a kept view of a main thread (or a reader)."""
        rend = self._views.get(scope)
        if self.read_aheads is None or rend is None:
            return None
        snap = await self.snapshot(scope[0], scope[1])
        if scope[2] != snap.main_instance_id:
            return None
        return await self.read_aheads.read(
            scope, rend.last_sequence, query, self._tasks.of(scope), snap.through_session_sequence
        )

    async def _feed(
        self,
        key: tuple[str, str, str],
        rend: ThreadRenderer,
        query: FrontierQuery | None,
        ahead: ReadAhead | None,
    ) -> Frontier | None:
        """Feed ``rend`` the thread's records since it last looked: those read ahead when
        they were read from where it stands, else read now. Returns the frontier read
        with them (None without ``query``)."""
        found: Frontier | None
        if ahead is not None and ahead.after == rend.last_sequence:
            own, found = ahead.own, ahead.frontier
            self._tasks.read(key, ahead.tasks)
        else:
            own, found = await self._new_records(key, rend.last_sequence, query)
        for rec in own:
            rend.feed(rec, inherited=False)
        return found

    async def _new_records(
        self, key: tuple[str, str, str], after: int, query: FrontierQuery | None
    ) -> tuple[list[RecordView], Frontier | None]:
        """The thread's records after ``after``, and with ``query`` its frontier read
        with them (its task count continued from the last read's)."""
        if query is None or self.frontier is None:
            return await self.threads.own(*key, after), None
        through = None  # a main thread's first read: its run's snapshot boundary
        if self._tasks.of(key) is None and not query.child:
            through = (await self.snapshot(key[0], key[1])).through_session_sequence
            query = dataclasses.replace(query, inherited=True)
        own, found, counted = await self.frontier.own_and_frontier(
            *key, after, query, self._tasks.start(key, through)
        )
        self._tasks.read(key, counted, through)
        return own, found

    def _fingerprint(self, rend: ThreadRenderer, epoch: str) -> str:
        return render_state.fingerprint(
            rend.overhead, rend.summary_id, epoch, rend.large, self.counting, rend.transfer
        )

    async def _continued(
        self,
        snap: Snapshot,
        instance_id: str,
        fps: tuple[str, str],
        summary: SummaryView | None,
    ) -> ThreadRenderer | None:
        """A main view continued from the session's kept history (a new run's, or one
        whose summary changed). ``fps``: the view's fingerprint, and the same without
        its summary."""
        if instance_id != snap.main_instance_id:
            return None
        self._saved.pop((snap.session_id, snap.run_id, instance_id), None)
        return await self.histories.continued(self.threads, snap, fps[0], summary, fps[1])

    async def _restore(
        self, key: tuple[str, str, str], fp: str, summary: SummaryView | None
    ) -> ThreadRenderer | None:
        self._saved.pop(key, None)
        if self.states is None:
            return None
        stored = await self.states.load(*key, fp)
        if stored is None:
            return None
        covered = summary.covered if summary else frozenset()
        try:  # packed as stored: the records' frame is decompressed if ever read
            rend = render_state.load(stored.data, self.count, covered, self.building)
        except state_packing.Unreadable:  # a cache: a damaged entry costs a full render
            log.warning("render state of %s unreadable; rendering in full", key, exc_info=True)
            return None
        if rend is not None:
            self._saved[key] = stored.last_sequence
        return rend

    def _store(self, key: tuple[str, str, str], epoch: str, rend: ThreadRenderer) -> None:
        """Store the state when none is (a full render) or the view grew enough since,
        under what the renderer was built with (``large=None`` reuses any). The bytes
        are taken now, under the view's lock; the write runs beside the prepare."""
        if self.states is None or rend.record_count < self.store_min:
            return
        saved = self._saved.get(key)
        if saved is not None and rend.last_sequence - saved < max(
            SAVE_MIN, rend.record_count // SAVE_SHARE
        ):
            return
        self._saved[key] = rend.last_sequence
        state = StoredState(rend.last_sequence, render_state.dump(rend))
        fp = self._fingerprint(rend, epoch)
        task = asyncio.get_running_loop().create_task(self._save(key, fp, state))
        self._saving.add(task)
        task.add_done_callback(self._saving.discard)

    async def _save(self, key: tuple[str, str, str], fp: str, state: StoredState) -> None:
        assert self.states is not None
        try:
            packed = await asyncio.to_thread(state_packing.pack, state.data)
            await self.states.save(*key, fp, StoredState(state.last_sequence, packed))
        except Exception:  # a cache: the next cold prepare renders in full instead
            log.warning("render state of %s not stored", key, exc_info=True)
            if self._saved.get(key) == state.last_sequence:
                self._saved.pop(key, None)

    async def flush(self) -> None:
        """Wait for the render states being written (shutdown, tests)."""
        while self._saving:
            await asyncio.gather(*list(self._saving))

    async def _rebuild(
        self,
        snap: Snapshot,
        instance_id: str,
        message_overhead: int,
        summary: SummaryView | None,
        large: LargeResultSettings | None,
        transfer: ChildTransferPolicy | None = None,
        fps: tuple[str, str] = ("", ""),
    ) -> ThreadRenderer:
        rend = ThreadRenderer(
            self.count,
            message_overhead,
            summary.covered if summary else frozenset(),
            summary.summary_id if summary else None,
            large,
            transfer,
        )
        if instance_id != snap.main_instance_id:
            # R13: a child sees only the background its parent exported (as material)
            # and its own thread — no inherited history — within the release's limits.
            rend.add_background(
                await self.threads.transferred(snap.session_id, snap.run_id, instance_id)
            )
            if summary is not None:  # the child's own summary chain (R13.1)
                rend.add_summary(summary.text, summary.tokens)
        else:
            if summary is not None:
                rend.add_summary(summary.text, summary.tokens)
            inherited = await self.threads.inherited(
                snap.session_id, snap.through_session_sequence, rend.covered
            )  # what the summary covers is not shown: read only where it is tracked
            for rec in inherited.records:
                rend.feed(rec, inherited=True)
            rend.record_count += inherited.unread  # fed, they would only be counted
            through = snap.through_session_sequence
            fp, base = fps
            self.histories.keep(snap.session_id, fp, through, rend, base)  # the next runs
            rend.seal_inherited()
        rend.last_sequence = snap.through_session_sequence
        return rend

    def _evict(self) -> None:
        while len(self._views) > self.capacity:
            old, _ = self._views.popitem(last=False)
            self._epochs.pop(old, None)
            self._tasks.forget(old)
            self._saved.pop(old, None)
            lock_of_old = self._locks.get(old)
            if lock_of_old is not None and not lock_of_old.locked():
                # A lock in use stays: a waiter must find the same lock, or two
                # prepares could feed one renderer at once.
                del self._locks[old]
