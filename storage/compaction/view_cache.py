"""The session processor's main compaction views kept between batches (issue 37): every
batch checks the sessions it touched (pre-emptive probe), and most observations read
their view; read from PostgreSQL each time, the view cost two round trips per session
and batch.

What is kept are a main view's *facts* — the run's snapshot boundary, whether a run
started after it, the summary it reuses (R2.7), the revocation epoch — never its
counters or its job in flight, which are read with the stamp in the same statement.
They are kept under a ``Stamp``: the session's next sequence and its main lineage's
current summary. Two committed states of a session with the same stamp have the same
facts: every write they depend on either adds a record (runs, snapshots, revocations and
retractions, and the summaries a revocation invalidates, are written with records, so
the sequence moves) or sets the lineage's current summary (a committed compaction). So
an entry is used only when its stamp is the session's stamp as committed before this
transaction, and this transaction's own records of the session cannot have changed a
fact (``KEEPS_FACTS``); an entry a transaction read or confirmed is kept only once that
transaction committed, and an entry moves on past a committed transaction's own records
when they all keep the facts (``TxViews._advance``). Another processor's writes (a
rebalance, a restart) move the stamp: the view is read again. Nothing here trusts a fact
the stamp does not pin.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import asyncpg

from domain.compaction.triggers import Counters
from domain.context.rendering import RecordView
from schemas.contracts import RecordKind
from schemas.wire import ControlEvent
from storage.compaction.view_state import ViewState, ViewStateCache, load_view_state
from storage.records import processing

# Record kinds that change none of a main view's facts: a run's messages, calls and
# results, the frontier, and a run's end or resumption (neither starts a run nor moves
# a snapshot). Any other kind (a run started, a resource's (de)activation, a
# retraction, a kind added later) makes the view be read again.
KEEPS_FACTS = frozenset(
    {
        RecordKind.USER_INPUT,
        RecordKind.ASSISTANT_MESSAGE,
        RecordKind.TOOL_CALL,
        RecordKind.TOOL_OUTCOME,
        RecordKind.CHILD_RESULT,
        RecordKind.SUPPLEMENT,
        RecordKind.PLAN_UPDATED,
        RecordKind.CONSTRAINT_SET,
        RecordKind.CONSTRAINT_RETIRED,
        RecordKind.DECISION_RECORDED,
        RecordKind.QUESTION_OPENED,
        RecordKind.QUESTION_CLOSED,
        RecordKind.RUN_FINISHED,
        RecordKind.RUN_CANCELLED,
        RecordKind.RUN_RESUMED,
    }
)


@dataclass(frozen=True)
class Stamp:
    """What a session's main view facts are pinned to (see the module's docstring)."""

    sequence: int  # the session's next_session_sequence
    summary_id: str | None  # its main lineage's current_summary_id


UNCOVERED_MAX = 256


@dataclass(frozen=True)
class Uncovered:
    """A session's inherited records through ``through`` that ``covered`` leaves shown,
    as committed under revocation epoch ``epoch`` (``PgPreemptReads.view_records``)."""

    through: int
    covered: frozenset[str]
    epoch: str
    records: tuple[RecordView, ...]

    def serves(self, through: int, covered: frozenset[str], epoch: str) -> bool:
        """Whether a view through ``through`` under ``covered`` goes on from these: the
        same epoch (no revocation or retraction since), a boundary at or past theirs,
        and a summary covering at least what theirs covers."""
        return epoch == self.epoch and self.through <= through and self.covered <= covered


@dataclass
class ViewCache:
    """Committed main views by session, each with the stamp it was read at (one per
    processor process)."""

    entries: dict[str, tuple[Stamp, ViewState]] = field(default_factory=dict)
    # (session, run) -> the run's main instance: written once, with the run.
    mains: dict[tuple[str, str], str] = field(default_factory=dict)
    uncovered: dict[str, Uncovered] = field(default_factory=dict)  # by session
    limit: int = 8192  # per map: past it everything is forgotten (read again on use)
    # Inherited records are kept for this many sessions, up to ``UNCOVERED_MAX`` records
    # each (their texts are held: a session never summarized is not kept whole).
    uncovered_limit: int = 1024

    def keep_uncovered(self, session_id: str, kept: Uncovered) -> None:
        if len(kept.records) > UNCOVERED_MAX:
            self.uncovered.pop(session_id, None)
            return
        if len(self.uncovered) >= self.uncovered_limit:
            self.uncovered.clear()
        self.uncovered[session_id] = kept

    def keep(
        self, entries: dict[str, tuple[Stamp, ViewState]], mains: dict[tuple[str, str], str]
    ) -> None:
        if max(len(self.entries) + len(entries), len(self.mains) + len(mains)) > self.limit:
            self.entries.clear()
            self.mains.clear()
        self.entries.update(entries)
        self.mains.update(mains)


class TxViews:
    """One transaction's use of a ``ViewCache``: the records it wrote per session, and
    the views it read or confirmed, kept by ``commit`` once the transaction committed
    (dropped with it otherwise)."""

    def __init__(self, cache: ViewCache) -> None:
        self.cache = cache
        self.first_written: dict[str, int] = {}  # the lowest sequence written, by session
        self.last_written: dict[str, int] = {}  # and the highest
        self.spoiled = False  # a savepoint was rolled back: what was written is unknown
        self.changed: set[str] = set()  # sessions given a record that may change a fact
        self.staged: dict[str, tuple[Stamp, ViewState]] = {}
        self.mains: dict[tuple[str, str], str] = {}

    def wrote(self, session_id: str, sequence: int, kind: str) -> None:
        """This transaction wrote a record of ``kind`` at ``sequence``."""
        low = self.first_written.get(session_id, sequence)
        self.first_written[session_id] = min(low, sequence)
        high = self.last_written.get(session_id, sequence)
        self.last_written[session_id] = max(high, sequence)
        if kind not in KEEPS_FACTS:
            self.changed.add(session_id)
            self.staged.pop(session_id, None)
            return
        # A view read in this transaction stays this session's view past a record that
        # keeps the facts, written where its stamp stood (the next sequence then).
        staged = self.staged.get(session_id)
        if staged is not None and staged[0].sequence == sequence:
            self.staged[session_id] = (replace(staged[0], sequence=sequence + 1), staged[1])

    def lookup(self, session_id: str, run_id: str, now: Stamp) -> ViewState | None:
        """The facts of ``session_id``'s main view for ``run_id`` at stamp ``now`` (read
        in this transaction, after its writes so far), if known; its counters and job
        are stale."""
        staged = self.staged.get(session_id)
        if staged is not None and staged[0] == now and staged[1].run_id == run_id:
            return staged[1]  # read in this transaction, nothing written since
        if session_id in self.changed:
            return None
        found = self.cache.entries.get(session_id)
        if found is None or found[1].run_id != run_id:
            return None
        # The stamp as committed before this transaction: its records are of kinds that
        # keep the facts, and start at the sequence the session had.
        before = Stamp(self.first_written.get(session_id, now.sequence), now.summary_id)
        if found[0] != before:
            return None
        self.staged[session_id] = (now, found[1])
        return found[1]

    def read(self, session_id: str, now: Stamp, view: ViewState) -> None:
        """``view`` was read from the database at ``now``, in this transaction. (A resumed
        run's view is not kept: its counters are not the session's.)"""
        if not view.resumed:
            self.staged[session_id] = (now, view)

    def spoil(self) -> None:
        """A savepoint of this transaction was rolled back: keep nothing it read."""
        self.staged.clear()
        self.spoiled = True

    def main_of(self, session_id: str, run_id: str) -> str | None:
        key = (session_id, run_id)
        return self.mains.get(key) or self.cache.mains.get(key)

    def commit(self) -> None:
        if not self.spoiled:
            self._advance()
        self.cache.keep(self.staged, self.mains)

    def _advance(self) -> None:
        """The views of the sessions this transaction wrote only records that keep the
        facts to, kept at the stamp past its last record: a batch that appends a step
        without reading the view leaves the next batch's read valid. (The session was
        locked from its first record to its last: the records between an entry's stamp
        and that one are all this transaction's.)"""
        for sid, last in self.last_written.items():
            if sid in self.changed:
                continue
            found = self.staged.get(sid)
            if found is None:
                kept = self.cache.entries.get(sid)
                if kept is None or kept[0].sequence != self.first_written[sid]:
                    continue  # not the stamp the session had: another writer's records
                found = kept
            stamp, view = found
            if stamp.sequence <= last:
                self.staged[sid] = (replace(stamp, sequence=last + 1), view)


# The facts of compaction views that never change (a summary's content, "may run R
# reuse summary S"), kept for the process's life as Prepare keeps its own: the processor
# reads a touched session's view at every batch (its pre-emptive check, observations,
# outcomes), and without them each read cost up to three more round trips (issue 37).
_FACTS = ViewStateCache()


async def view_of(
    conn: asyncpg.Connection, session_id: str, run_id: str, lineage: str
) -> ViewState:
    """The compaction view of ``lineage`` ("main" or a child instance) for ``run_id``."""
    view = await load_view_state(
        conn,
        session_id,
        run_id,
        child_instance_id=None if lineage == "main" else lineage,
        cache=_FACTS,
    )
    if view is None:
        raise LookupError(f"session {session_id} not found")
    return view


def stamp_of(session: Any, summary_id: str | None) -> Stamp:
    """The stamp of a session's main view facts: its ``sessions`` row (or a row with its
    columns) and its main lineage's current summary."""
    return Stamp(int(session["next_session_sequence"]), summary_id)


def session_counters(session: Any) -> Counters:
    """A session's counters: a main view's, unless its run was resumed (R2.6)."""
    return Counters(int(session["user_turns"]), int(session["model_steps"]))


class CachedViews:
    """The view reads of the processor's store (``storage.processor_store``) over the
    batch's connection, through the cache while a batch transaction holds one."""

    conn: asyncpg.Connection
    # The batch transaction's use of the process's main views, if any, and the stamps and
    # counters the pre-emptive candidates were read with (a session's until it is written).
    views: TxViews | None = None
    probed: dict[str, tuple[Stamp, Counters]]

    async def main_instance_id(self, session_id: str, run_id: str) -> str | None:
        """The instance id of a run's main thread (None if the run is unknown); kept
        once a transaction that read it committed (it is written once, with the run)."""
        tx = self.views
        if tx is not None and (known := tx.main_of(session_id, run_id)) is not None:
            return known
        main = await processing.main_instance_id(self.conn, session_id, run_id)
        if tx is not None and main is not None:
            tx.mains[(session_id, run_id)] = main
        return main

    async def lineage_of(self, ev: ControlEvent) -> str:
        """ "main" for the run's main thread, else the child instance (R13.1)."""
        main = await self.main_instance_id(ev.session_id, ev.run_id)
        return "main" if main == ev.instance_id else ev.instance_id

    async def _view(
        self,
        session_id: str,
        run_id: str,
        lineage: str,
        now: Stamp,
        counters: Counters,
        job_id: str | None = None,
    ) -> ViewState:
        """``view_of``; a main view's facts from the cache when its stamp allows, with
        ``counters`` and ``job_id`` (the session's and the lineage's, read with ``now``)."""
        tx = self.views
        if lineage != "main" or tx is None:
            return await view_of(self.conn, session_id, run_id, lineage)
        known = tx.lookup(session_id, run_id, now)
        if known is not None:
            return replace(known, counters=counters, active_job_id=job_id)
        view = await view_of(self.conn, session_id, run_id, lineage)
        tx.read(session_id, now, view)
        return view
