"""The records a compaction job sees, cached per thread between jobs.

A thread's view only grows (the inherited part is fixed by the run's snapshot), so the
view read for one job is extended with the records committed since, instead of being
read again. A revocation rewrites past records (withdrawn content, R15.3), so a cached
view read before one is never reused.

A job over its bound reads again every record its parent covers (R11.8,
``CompactionJobs.covered_records``); its successor's parent covers those and a few more.
So what one job read is kept per session, and the next reads only the records it did
not (same epoch: no revocation since). In a long session the covered records soon hold
more than a job may read again; that answer is kept too, and a later job's superset is
answered without summing the session's covered history again.

``AgentRequests`` reads the other thing a job may use of its thread: the agent's last
rendered request, which a summarizer of the agent's own model continues
(``domain.summarizer.fork``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import orjson

from domain.compaction.drafts import COMPACTION_PURPOSE
from domain.context.rendering import RecordView
from domain.summarizer.fork import AgentRequest, agent_request
from domain.window.budget import ModelProfile
from domain.window.model_catalog import for_purpose
from schemas.wire import CompactionRequest
from services.compaction.costs import ReleaseReads
from storage.calls.agent_contexts import AgentContexts
from storage.compaction.jobs import CompactionJobs

log = logging.getLogger("agentloom.compaction")

THREAD_CACHE = 64  # threads whose views stay cached between jobs
SESSION_CACHE = 64  # sessions whose covered records stay cached between jobs


@dataclass(frozen=True)
class _Cached:
    records: list[RecordView]
    seen: int  # the watermark the records were read up to
    epoch: str  # the session's revocation epoch when they were read
    omitted: frozenset[str]  # inherited records left out: covered by the parent summary


@dataclass(frozen=True)
class _Covered:
    epoch: str  # the session's revocation epoch when they were read
    records: dict[str, RecordView]  # as ``covered_records`` answered them: by id
    # Ids found to hold more than a number of tokens, and that number: any superset holds
    # more too (a record's token count is fixed within an epoch).
    over: tuple[frozenset[str], int] | None = None


class JobRecords:
    def __init__(
        self, jobs: CompactionJobs, capacity: int = THREAD_CACHE, sessions: int = SESSION_CACHE
    ) -> None:
        self.jobs = jobs
        self.capacity = capacity
        self.sessions = sessions
        # (session, run, instance) -> view; insertion order doubles as LRU order.
        self._threads: dict[tuple[str, str, str], _Cached] = {}
        # session -> the records its jobs read again; insertion order = LRU order.
        self._covered: dict[str, _Covered] = {}
        # session -> the inherited records of its last main view read (``seen``: its
        # run's boundary), which a later run's view goes on from.
        self._histories: dict[str, _Cached] = {}

    async def view(self, req: CompactionRequest, covered: frozenset[str]) -> list[RecordView]:
        """The job's view up to its watermark, in session order, without the inherited
        records in ``covered`` (its parent summary's; the caller drops the rest). A cached
        view serves while everything it left out is still covered: a summary's successor
        covers a superset, so a thread's jobs read their history once."""
        key = (req.session_id, req.run_id, req.instance_id)
        cached = self._threads.pop(key, None)
        epoch = await self.jobs.revocation_epoch(req.session_id)
        self._keep_covered(req.session_id, epoch)
        if (
            cached is None
            or cached.seen > req.view_watermark
            or cached.epoch != epoch
            or not cached.omitted <= covered
        ):
            cached = await self._inherited(key, covered, epoch)
        records = cached.records + await self.jobs.thread_view(
            *key, cached.seen, req.view_watermark
        )
        self._threads[key] = _Cached(records, req.view_watermark, epoch, cached.omitted)
        while len(self._threads) > self.capacity:
            self._threads.pop(next(iter(self._threads)))
        return records

    async def _inherited(
        self, key: tuple[str, str, str], covered: frozenset[str], epoch: str
    ) -> _Cached:
        """A thread's inherited records: the session's history kept from an earlier run
        and the records committed after it, when it serves (same epoch, and what it left
        out still covered); else read whole. Each run is a new thread, so without it
        every job of a new run read the session's history again."""
        sid = key[0]
        kept = self._histories.pop(sid, None)
        found = None
        if kept is not None and kept.epoch == epoch and kept.omitted <= covered:
            found = await self.jobs.inherited_after(*key, kept.seen, covered)
        if kept is not None and found is not None:
            tail, through = found
            records = [r for r in kept.records if r.record_id not in covered] + tail
        else:
            records, through = await self.jobs.inherited_view(*key, covered)
        history = _Cached(records, through, epoch, covered)
        if records or found is not None:  # a main view's (a child thread inherits none)
            self._histories[sid] = history
        elif kept is not None:  # a child's view, or an empty one: the history stays
            self._histories[sid] = kept
        while len(self._histories) > self.sessions:
            self._histories.pop(next(iter(self._histories)))
        return history

    def _keep_covered(self, session_id: str, epoch: str) -> None:
        """The session's covered records kept for this job if read in ``epoch``."""
        kept = self._covered.pop(session_id, None)
        same = kept is not None and kept.epoch == epoch
        self._covered[session_id] = kept if kept is not None and same else _Covered(epoch, {})
        while len(self._covered) > self.sessions:
            self._covered.pop(next(iter(self._covered)))

    async def covered(
        self, session_id: str, ids: frozenset[str], max_tokens: int
    ) -> list[RecordView] | None:
        """``CompactionJobs.covered_records`` of ``ids`` (in session order; None over
        ``max_tokens``), reading only the ids no earlier job of the session read in the
        epoch ``view`` found: the answer is the same, the records read once."""
        kept = self._covered.get(session_id) or _Covered("", {})
        if kept.over is not None and kept.over[0] <= ids and kept.over[1] >= max_tokens:
            return None  # a long history: its parent's covered records alone were over
        known = [r for i in ids if (r := kept.records.get(i)) is not None]
        tokens = sum(r.token_count for r in known)
        if tokens > max_tokens:
            self._over(session_id, kept, ids, max_tokens)
            return None
        missing = ids.difference(kept.records)
        more = (
            await self.jobs.covered_records(session_id, missing, max_tokens - tokens)
            if missing
            else []
        )
        if more is None:
            self._over(session_id, kept, ids, max_tokens)
            return None
        kept.records.update((r.record_id, r) for r in more)
        return sorted([*known, *more], key=lambda r: r.session_sequence)

    def _over(self, session_id: str, kept: _Covered, ids: frozenset[str], limit: int) -> None:
        """``ids`` hold more than ``limit`` tokens: kept, so that a later job's superset
        (the next summary covers what this one does, and more) is not summed again."""
        if self._covered.get(session_id) is kept:
            self._covered[session_id] = replace(kept, over=(ids, limit))


@dataclass(frozen=True)
class AgentRequests:
    """The agent's last rendered request of a job's thread (a prepared action context,
    any Prepare instance's: they are stored), when the ``compaction`` purpose's profile
    (the release's, or the one it references in ``catalog``) is the agent's model in
    ``fork_format``, the summarizer client's own; None otherwise, and the summarizer sends
    its own request."""

    contexts: AgentContexts
    releases: ReleaseReads
    fork_format: str
    catalog: Mapping[str, ModelProfile] = field(default_factory=dict)

    async def request(self, req: CompactionRequest) -> AgentRequest | None:
        last = await self.contexts.last_action(req.session_id, req.run_id, req.instance_id)
        found = None if last is None else await self.releases.release_pricing(req.session_id)
        if last is None or found is None:
            return None
        try:
            profile = ModelProfile.from_dict(found.model_profile)
            summarizer = for_purpose(found.policy, COMPACTION_PURPOSE, profile, self.catalog)
            stored = orjson.loads(last.body)
            return agent_request(stored, last.space_id, summarizer, self.fork_format)
        except (KeyError, TypeError, ValueError) as exc:  # an older or foreign body
            log.warning("job %s: the agent's request is not forked: %r", req.job_id, exc)
            return None
