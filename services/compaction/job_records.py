"""The records a compaction job sees, cached per thread between jobs.

A thread's view only grows (the inherited part is fixed by the run's snapshot), so the
view read for one job is extended with the records committed since, instead of being
read again. A revocation rewrites past records (withdrawn content, R15.3), so a cached
view read before one is never reused.

``AgentRequests`` reads the other thing a job may use of its thread: the agent's last
rendered request, which a summarizer of the agent's own model continues
(``domain.summarizer.fork``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class _Cached:
    records: list[RecordView]
    seen: int  # the watermark the records were read up to
    epoch: str  # the session's revocation epoch when they were read
    omitted: frozenset[str]  # inherited records left out: covered by the parent summary


class JobRecords:
    def __init__(self, jobs: CompactionJobs, capacity: int = THREAD_CACHE) -> None:
        self.jobs = jobs
        self.capacity = capacity
        # (session, run, instance) -> view; insertion order doubles as LRU order.
        self._threads: dict[tuple[str, str, str], _Cached] = {}

    async def view(self, req: CompactionRequest, covered: frozenset[str]) -> list[RecordView]:
        """The job's view up to its watermark, in session order, without the inherited
        records in ``covered`` (its parent summary's; the caller drops the rest). A cached
        view serves while everything it left out is still covered: a summary's successor
        covers a superset, so a thread's jobs read their history once."""
        key = (req.session_id, req.run_id, req.instance_id)
        cached = self._threads.pop(key, None)
        epoch = await self.jobs.revocation_epoch(req.session_id)
        if (
            cached is None
            or cached.seen > req.view_watermark
            or cached.epoch != epoch
            or not cached.omitted <= covered
        ):
            inherited, through = await self.jobs.inherited_view(*key, covered)
            cached = _Cached(inherited, through, epoch, covered)
        records = cached.records + await self.jobs.thread_view(
            *key, cached.seen, req.view_watermark
        )
        self._threads[key] = _Cached(records, req.view_watermark, epoch, cached.omitted)
        while len(self._threads) > self.capacity:
            self._threads.pop(next(iter(self._threads)))
        return records


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
