"""One read of a thread's compaction view: the counters of the view, the summary
it may reuse and that summary's baseline, the job in flight and the revocation epoch.

The processor's trigger checks and Prepare read the same facts; this module is the one
place they are read, so that each rule (R2.6 counters of the view, R2.7 summary reuse,
R13.1 a child's own lineage) lives once.

The summary-reuse rule (R2.7) as unified here: walk the lineage's chain from its current
summary towards the root and take the first summary that is **committed** and whose view
is a prefix of this one. (The processor checked "committed"; Prepare did not — it relied
on revocation moving ``current_summary_id`` back. The committed check is kept: an
invalidated summary, R11.8, must never be reused, even as a parent further up the chain.)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from domain.compaction.triggers import Counters
from storage.compaction.main_view import MAIN_COUNTS, MAIN_VIEW, counted_view
from storage.compaction.summary_reuse import SUMMARY_COLUMNS, SummaryRef, reusable, summary_ref
from storage.records import retraction
from storage.records.threads import snapshot_boundary


@dataclass(frozen=True)
class ViewState:
    """A thread's compaction view, read in one place (see ``load_view_state``)."""

    session_id: str
    run_id: str
    lineage: str  # "main" or the child instance id (R13.1)
    through: int  # the run's snapshot boundary (session sequence)
    counters: Counters  # R8.1/R8.2 of this view, rebuilt from unique records (R2.6)
    summary: SummaryRef | None  # the effective summary (R2.7), None before the first
    active_job_id: str | None  # R7.4: the lineage's job in flight, if any
    # Changes whenever a resource is revoked or reactivated, or a record is retracted.
    revocation_epoch: str
    # A run started after this one's snapshot (a resumed older run): its counters are
    # counted record by record, not the session's (R2.6).
    resumed: bool = False

    @property
    def baseline(self) -> Counters:
        """The effective summary's baseline: counters since it are what triggers see."""
        return self.summary.baseline if self.summary is not None else Counters()

    @property
    def summary_id(self) -> str | None:
        return self.summary.summary_id if self.summary is not None else None


@dataclass
class ViewStateCache:
    """Facts that never change, safe to keep for the life of a process (Prepare keeps
    one): a summary's content and "may run R reuse summary S". A summary's status does
    change (revocation), so it is read again on every call."""

    summaries: dict[str, SummaryRef] = field(default_factory=dict)
    reusable: dict[tuple[str, str], bool] = field(default_factory=dict)
    limit: int = 4096  # entries per map: a long-running Prepare sees every session's

    def bound(self) -> None:
        """Forget everything once a map outgrows ``limit`` (they are only a cache: each
        fact is read again on its next use)."""
        for facts in (self.summaries, self.reusable):
            if len(facts) > self.limit:
                facts.clear()


async def load_view_state(
    conn: asyncpg.Connection,
    session_id: str,
    run_id: str,
    *,
    child_instance_id: str | None = None,
    through: int | None = None,
    cache: ViewStateCache | None = None,
    row: MainRow | None = None,
) -> ViewState | None:
    """The compaction view of run ``run_id``'s main thread, or with ``child_instance_id``
    of that child thread's own lineage (R13.1: its own counters, summary and job).

    ``through`` is the run's snapshot boundary when the caller already has it (Prepare's
    snapshot); otherwise it is read. ``cache`` keeps immutable facts across calls.
    ``row``: the main view's row, read by the caller with ``main_row_sql`` (with its
    own reads, in one round trip), with ``through`` and ``CHAIN_DEPTH``.
    Returns None when the session does not exist. Reads only; inside a transaction it
    sees that transaction's writes (the processor calls it in its batch transaction).
    """
    cache = cache if cache is not None else ViewStateCache()
    if child_instance_id is not None:
        if through is None:
            through = await snapshot_boundary(conn, session_id, run_id)
        return await _child_view(conn, session_id, run_id, child_instance_id, through, cache)
    r = row if row is not None else await _main_row(conn, session_id, run_id, through, CHAIN_DEPTH)
    if not r:  # no session (a row read as JSON: an empty object)
        return None
    through = int(r["through"])
    counters = (
        await counted_view(conn, session_id, run_id, through)
        if r["later"]
        else Counters(r["user_turns"], r["model_steps"])
    )
    summary = await _effective(conn, r["chain"], session_id, run_id, through, cache, r)
    if summary is None and r["more"]:  # none of the newest serves: look further back
        deep = await _main_row(conn, session_id, run_id, through, None)
        if deep is not None:
            chain = deep["chain"][len(r["chain"]) :]
            summary = await _effective(conn, chain, session_id, run_id, through, cache)
    return ViewState(
        session_id,
        run_id,
        "main",
        through,
        counters,
        summary,
        r["active_job_id"],
        str(r["revocations"]),
        bool(r["later"]),
    )


async def _effective(
    conn: asyncpg.Connection,
    chain: list[str],
    session_id: str,
    run_id: str,
    through: int,
    cache: ViewStateCache,
    row: MainRow | None = None,
) -> SummaryRef | None:
    """The newest summary of ``chain`` this run's view may reuse (R2.7); ``row``: a view's
    row, which read the reuse of its newest summary."""
    for summary_id in chain:
        candidate = await _summary(conn, summary_id, cache)
        if candidate is not None and row is not None and row["reuse_of"] == summary_id:
            _known_reuse(row, candidate, run_id, cache)
        if candidate is not None and await _reusable(
            conn, candidate, session_id, run_id, through, cache
        ):
            return candidate
    return None


async def _main_row(
    conn: asyncpg.Connection,
    session_id: str,
    run_id: str,
    through: int | None,
    depth: int | None,
) -> asyncpg.Record | None:
    """Everything of a main view but record counts and reuse checks, in one round trip
    (``main_row_sql``)."""
    return await conn.fetchrow(
        main_row_sql("$1", "$2", "$3", "$4"), session_id, through, run_id, depth
    )


# A main view's row as ``main_row_sql`` reads it: a record, or a JSON object of it
# (empty without the session).
MainRow = Mapping[str, Any]


@functools.cache
def main_row_sql(session: str, through: str, run: str, depth: str) -> str:
    """The statement of a main view's row, its arguments at the placeholders given: the
    session, the run's snapshot boundary (``through``; NULL: read here, 0 for a run not
    known), the run, and how deep the summary chain is walked (``depth``; NULL: all the
    way, ``more`` says it goes further). Everything of the view but record counts and
    reuse checks. (A long session's chain holds hundreds of roll-ups, and the newest one
    nearly always serves.) One row, or none without the session."""
    # b is read once (MATERIALIZED): inlined, its boundary was looked up again for each
    # use of ``b.through``.
    return (
        f"WITH b AS MATERIALIZED (SELECT coalesce({through}::bigint,"
        " (SELECT x.through_session_sequence"
        "   FROM runs u JOIN history_snapshots x USING (snapshot_id)"
        f"   WHERE u.session_id = {session} AND u.run_id = {run}), 0) AS through)"
        " SELECT b.through, s.user_turns, s.model_steps, c.active_job_id,"
        # A run started after this one's snapshot: only then is this view not the whole
        # session (runs is small; the records after a snapshot may be many). Asked as
        # the newest other run's start, one step down ``runs_started``: as EXISTS, the
        # generic plan scanned every run of every session when the session had none.
        " coalesce((SELECT max(x.started_sequence) FROM runs x"
        f"   WHERE x.session_id = s.session_id AND x.run_id <> {run}) > b.through, false)"
        " AS later,"
        " (SELECT count(*) || ':' || coalesce(max(v.revoked_sequence), 0)"
        "  FROM revoked_resources v WHERE v.session_id = s.session_id)"
        f" || ':' || {retraction.count_sql('s.session_id')} AS revocations,"
        # The committed summaries of the chain, newest first, and whether it goes on
        # past the deepest one read: one walk, in the same round trip.
        " coalesce(w.chain, '{}') AS chain, w.more,"
        # Whether this run may reuse the chain's newest summary (R2.7), as
        # ``summary_reuse.reusable`` reads it: nearly always the one a view takes, and a
        # round trip of its own for each new run otherwise.
        " h.reuse_of, h.reuse_missing, h.reuse_later"
        " FROM b, sessions s LEFT JOIN compaction_state c"
        " ON c.session_id = s.session_id AND c.lineage = 'main'"
        f" LEFT JOIN LATERAL ({_chain(depth)} SELECT"
        "  array_agg(summary_id ORDER BY depth) FILTER (WHERE status = 'committed') AS chain,"
        "  (array_agg(parent_summary_id IS NOT NULL ORDER BY depth DESC))[1] AS more"
        "  FROM chain) w ON true"
        f" LEFT JOIN LATERAL ({_reuse(session, run)}) h ON true"
        f" WHERE s.session_id = {session}"
    )


def _reuse(session: str, run: str) -> str:
    """``summary_reuse.reusable``'s reads of the chain's newest summary (``w.chain[1]``)
    for run ``run`` at boundary ``b.through``: whether a record of this view before the
    summary's watermark is missing from the view it compacted, and the records after the
    boundary that are not the run's own (checked against the covered ids by the caller).
    Nothing is read for a summary of this run's own view."""
    return (
        "SELECT x.summary_id AS reuse_of, x.view_run_id IS DISTINCT FROM "
        f"{run} AND EXISTS (SELECT 1 FROM records r LEFT JOIN runs u"
        "   ON u.session_id = r.session_id AND u.run_id = r.run_id"
        f"   WHERE r.session_id = {session}"
        "   AND (r.instance_id IS NULL OR r.instance_id = u.main_instance_id)"
        "   AND r.session_sequence > x.view_through AND r.session_sequence <= x.source_watermark"
        "   AND r.run_id IS DISTINCT FROM x.view_run_id"
        f"   AND (r.session_sequence <= b.through OR r.run_id = {run})) AS reuse_missing,"
        f" CASE WHEN x.view_run_id = {run} THEN '{{}}'::text[] ELSE ARRAY(SELECT y.record_id"
        f"   FROM records y WHERE y.session_id = {session} AND y.session_sequence > b.through"
        f"   AND y.run_id IS DISTINCT FROM {run}) END AS reuse_later"
        " FROM summary_revisions x WHERE x.summary_id = w.chain[1]"
    )


# Summaries of a chain read with a view's row; the rest only if none of them serves
# (each is two index reads: 8 cost a quarter of the statement, and the newest serves).
CHAIN_DEPTH = 3


def _chain(depth: str) -> str:
    """The summary chain from the lineage's current summary back, at most ``depth``
    deep (NULL: all). Each step is one lookup by key: a subquery with a LIMIT is not
    pulled up into a join, which the planner hashed over a scan of every summary (the
    chain's single row per step is not what it estimates)."""
    return (
        "WITH RECURSIVE chain(summary_id, parent_summary_id, status, depth) AS ("
        "   SELECT summary_id, parent_summary_id, status, 0 FROM summary_revisions"
        "   WHERE summary_id = c.current_summary_id"
        "   UNION ALL SELECT p.summary_id, p.parent_summary_id, p.status, chain.depth + 1"
        "   FROM chain CROSS JOIN LATERAL (SELECT summary_id, parent_summary_id, status"
        "    FROM summary_revisions WHERE summary_id = chain.parent_summary_id LIMIT 1) p"
        f"   WHERE {depth}::int IS NULL OR chain.depth + 1 < {depth}::int)"
    )


async def _child_view(
    conn: asyncpg.Connection,
    session_id: str,
    run_id: str,
    instance_id: str,
    through: int,
    cache: ViewStateCache,
) -> ViewState | None:
    r = await conn.fetchrow(
        "SELECT c.active_job_id, c.current_summary_id,"
        " (SELECT status FROM summary_revisions WHERE summary_id = c.current_summary_id)"
        "  AS status,"
        " (SELECT count(*) || ':' || coalesce(max(v.revoked_sequence), 0)"
        "  FROM revoked_resources v WHERE v.session_id = s.session_id)"
        f" || ':' || {retraction.count_sql('s.session_id')} AS revocations,"
        # R13.1/R8.3: a child thread counts on its own — its tasks and its valid steps.
        " (SELECT count(*) FROM records WHERE session_id=$1 AND run_id=$2 AND instance_id=$3"
        "  AND kind = 'user_input') AS turns,"
        " (SELECT count(*) FROM records WHERE session_id=$1 AND run_id=$2 AND instance_id=$3"
        "  AND kind = 'assistant_message' AND payload->>'purpose' = 'action') AS steps"
        " FROM sessions s LEFT JOIN compaction_state c"
        " ON c.session_id = s.session_id AND c.lineage = $3"
        " WHERE s.session_id = $1",
        session_id,
        run_id,
        instance_id,
    )
    if r is None:
        return None
    # A child lineage is a single thread: its newest summary is always a prefix of its
    # view, so only the head is considered (as before: no walk up a child's chain).
    summary = None
    if r["current_summary_id"] is not None and r["status"] == "committed":
        summary = await _summary(conn, r["current_summary_id"], cache)
    return ViewState(
        session_id,
        run_id,
        instance_id,
        through,
        Counters(int(r["turns"]), int(r["steps"])),
        summary,
        r["active_job_id"],
        str(r["revocations"]),
    )


async def counted_after(
    conn: asyncpg.Connection, view: ViewState, watermark: int, next_sequence: int | None = None
) -> Counters:
    """What ``view``'s counters count after sequence ``watermark``: records the view got
    after an observer (a prepare) saw it through ``watermark``. A trigger check
    subtracts them, so it is decided on the view the observer saw, whichever reached
    the processor first — an observation is advisory and is not waited for, so the
    runtime's next appends can overtake it (R7.2/R7.3, R8.4: and the baseline a job
    records is that of the view it summarizes). A range scan of the view's tail; empty
    when nothing came after — and not read when ``next_sequence``, the session's next
    sequence, says no record is past the watermark."""
    if next_sequence is not None and watermark >= next_sequence - 1:
        return Counters()
    if view.lineage != "main":  # a child thread: its own tasks and steps (R13.1)
        r = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE kind = 'user_input') AS turns,"
            " count(*) FILTER (WHERE kind = 'assistant_message'"
            " AND payload->>'purpose' = 'action') AS steps"
            " FROM records WHERE session_id=$1 AND run_id=$2 AND instance_id=$3"
            " AND session_sequence > $4",
            view.session_id,
            view.run_id,
            view.lineage,
            watermark,
        )
    else:
        r = await conn.fetchrow(
            MAIN_COUNTS
            + MAIN_VIEW
            + " AND r.session_sequence > $2 AND (r.session_sequence <= $3 OR r.run_id = $4)",
            view.session_id,
            watermark,
            view.through,
            view.run_id,
        )
    return Counters(int(r["turns"]), int(r["steps"]))


async def _summary(
    conn: asyncpg.Connection, summary_id: str, cache: ViewStateCache
) -> SummaryRef | None:
    found = cache.summaries.get(summary_id)
    if found is None:
        row = await conn.fetchrow(
            f"SELECT {SUMMARY_COLUMNS} FROM summary_revisions WHERE summary_id=$1", summary_id
        )
        if row is None:
            return None
        cache.bound()
        found = cache.summaries[summary_id] = summary_ref(row)
    return found


def _known_reuse(r: MainRow, summary: SummaryRef, run_id: str, cache: ViewStateCache) -> None:
    """Whether ``run_id`` may reuse ``summary`` as the row read it (``_reuse``), kept in
    ``cache`` as ``_reusable`` keeps what ``summary_reuse.reusable`` says."""
    key = (summary.summary_id, run_id)
    if key in cache.reusable or r["reuse_missing"] is None:
        return
    later = r["reuse_later"] or ()  # nearly always none: the covered ids are not looked at
    covered = set(summary.covered_record_ids) if later else set()
    cache.bound()
    cache.reusable[key] = not r["reuse_missing"] and not any(i in covered for i in later)


async def _reusable(
    conn: asyncpg.Connection,
    summary: SummaryRef,
    session_id: str,
    run_id: str,
    through: int,
    cache: ViewStateCache,
) -> bool:
    key = (summary.summary_id, run_id)
    known = cache.reusable.get(key)
    if known is None:
        known = await reusable(conn, summary, session_id, run_id, through)
        cache.bound()
        cache.reusable[key] = known
    return known
