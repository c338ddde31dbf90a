"""A session's inherited history as a renderer, kept to start the next run's main view.

Every new question is a new run whose main view is the session's history up to its
snapshot (R2.1-R2.3) and then its own thread. The history of run N+1 is the history of
run N plus what was committed between the two snapshots, so the main view of a new run
is continued from the history kept for the session's previous one: the records after
its boundary are read (one statement, a question's worth) and fed, instead of the whole
history being read and rendered again.

What is kept is the renderer as ``ThreadViews._rebuild`` leaves it before sealing, under
the fingerprint of everything its rendering depends on (``render_state.fingerprint``:
overhead, summary, revocation epoch, large-result and transfer settings, counting). A
new summary that covers at least what the kept one covers (the next roll-up of the
session's compaction) re-summarizes the kept history in memory (``resummarized``); any
other change of the fingerprint — a summary covering less or none, a revocation or a
retraction, other settings — renders the next view in full, and so does a run resumed
under an older snapshot than the one kept.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from dataclasses import dataclass

from domain.context.rendering import ThreadRenderer
from domain.window.record_view import DeferredRecords
from storage.records.threads import Inherited, Snapshot, SummaryView, Threads

log = logging.getLogger(__name__)

# A renderer's attributes ``copy_renderer`` knows (tests/unit/test_view_history.py holds it
# to the renderer's: an attribute added there must be copied here too).
SETTINGS = frozenset({"count", "overhead", "large", "covered", "summary_id", "transfer"})
SCALARS = frozenset({"record_count", "last_sequence"})
CONTAINERS = frozenset(
    {
        "messages",
        "tokens",
        "message_counts",
        "task_indices",
        "protected_cache",
        "externalized",
        "skill_loads",
        "activations",
        "skill_used",
        "runs",
        "transfer_notes",
        "_records",
        "_open",
    }
)


def copy_renderer(src: ThreadRenderer) -> ThreadRenderer:
    """A renderer that goes on independently of ``src``: every container it grows is
    copied (the messages and records themselves are never changed once written, so they
    are shared); a skill load's message index and an open group change in place, so
    they are copied too."""
    out = ThreadRenderer.__new__(ThreadRenderer)
    out.__dict__.update({k: v for k, v in vars(src).items() if k in SETTINGS | SCALARS})
    out.messages = list(src.messages)
    out.tokens = dict(src.tokens)
    out.message_counts = dict(src.message_counts)
    out.task_indices = list(src.task_indices)
    out.protected_cache = list(src.protected_cache)
    out.externalized = list(src.externalized)
    out.skill_loads = {k: dataclasses.replace(v) for k, v in src.skill_loads.items()}
    out.activations = dict(src.activations)
    out.skill_used = dict(src.skill_used)
    out.runs = dict(src.runs)
    out.transfer_notes = list(src.transfer_notes)
    out._records = DeferredRecords(list(src.records))
    grp = src._open
    out._open = (
        None
        if grp is None
        else dataclasses.replace(grp, results=dict(grp.results), deferred=list(grp.deferred))
    )
    return out


def resummarized(src: ThreadRenderer, summary: SummaryView) -> ThreadRenderer:
    """``src``, a kept history (not sealed), rendered again under ``summary``, which covers
    every record ``src``'s summary covers: what a full render of the same records under
    ``summary`` gives, without reading them again. The records ``src`` shows are placed
    again in order, those ``summary`` covers now left out. What ``src`` tracked of every
    record it saw (runs, skill loads and activations) holds as it is: tracking does not
    depend on what a summary covers; only where a skill load is shown is found again."""
    out = ThreadRenderer(
        src.count, src.overhead, summary.covered, summary.summary_id, src.large, src.transfer
    )
    out.add_summary(summary.text, summary.tokens)
    out.skill_loads = {
        k: dataclasses.replace(v, message_index=None) for k, v in src.skill_loads.items()
    }
    out.activations = dict(src.activations)
    out.skill_used = dict(src.skill_used)
    out.runs = dict(src.runs)
    out.transfer_notes = list(src.transfer_notes)
    out.show(src.records)
    out.record_count, out.last_sequence = src.record_count, src.last_sequence
    return out


@dataclass
class History:
    """A session's inherited history rendered through ``through``, not sealed; ``base``:
    its fingerprint without its summary (``render_state.fingerprint`` of no summary)."""

    fingerprint: str
    through: int
    rend: ThreadRenderer
    base: str = ""


class Histories:
    """The latest inherited history of up to ``capacity`` sessions (least recently used
    forgotten first)."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._kept: OrderedDict[str, History] = OrderedDict()

    def keep(
        self, session_id: str, fingerprint: str, through: int, rend: ThreadRenderer, base: str = ""
    ) -> None:
        """Keep a copy of ``rend`` (a main view's inherited part, through ``through``),
        unless a later history under the same fingerprint is kept already."""
        old = self._kept.get(session_id)
        if old is not None and old.fingerprint == fingerprint and old.through > through:
            return
        kept = copy_renderer(rend)
        kept.last_sequence = through
        self._put(session_id, History(fingerprint, through, kept, base))

    def _put(self, session_id: str, history: History) -> None:
        self._kept[session_id] = history
        self._kept.move_to_end(session_id)
        while len(self._kept) > self.capacity:
            self._kept.popitem(last=False)

    async def continued(
        self,
        threads: Threads,
        snap: Snapshot,
        fingerprint: str,
        summary: SummaryView | None,
        base: str = "",
    ) -> ThreadRenderer | None:
        """The main view of ``snap``'s run through its boundary, sealed, continued from
        the session's kept history (re-summarized first when only its summary changed,
        to one covering more: ``base`` is ``fingerprint`` without the summary); None when
        none serves (then it is rendered in full)."""
        sid, through = snap.session_id, snap.through_session_sequence
        found = self._kept.get(sid)
        if found is None or found.through > through:
            return None
        if found.fingerprint != fingerprint:
            if not (base and found.base == base and summary is not None):
                return None
            if not found.rend.covered <= summary.covered:
                return None  # shows records the kept history left out: read them
            found = History(fingerprint, found.through, resummarized(found.rend, summary), base)
            self._put(sid, found)
        covered = summary.covered if summary else frozenset()
        start = found.through
        tail = Inherited([])  # the same boundary (the run's view again): nothing to read
        if through > start:
            tail = await threads.inherited_tail(sid, start, through, covered)
        if self._kept.get(sid) is not found or found.through != start:
            return None  # advanced or replaced meanwhile: not this read's starting point
        hist = found.rend
        try:
            for rec in tail.records:
                hist.feed(rec, inherited=True)
        except Exception:
            del self._kept[sid]  # half fed: no longer a history of any boundary
            raise
        hist.record_count += tail.unread
        hist.last_sequence = found.through = through
        self._kept.move_to_end(sid)
        rend = copy_renderer(hist)
        rend.seal_inherited()
        return rend
