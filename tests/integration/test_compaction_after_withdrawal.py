"""A withdrawal never stalls compaction (issue 28, item 5; R11.8, R9.4, R15.3).

After a revocation invalidates the summary a session relied on, the next job is rebuilt
from the sources still authorized — a withdrawn result keeps its place, not its content —
and commits; every later question due a compaction gets one, with one summarizer call
per job and no ``version_conflict`` loop. The same when a retraction, or a revocation
followed by a grant again, lands while a job runs: that job is refused and exactly one
job rebuilt on the new state follows.

The summarizer is the OpenAI-compatible adapter talking to a scripted server in this
process, so the test counts the real model calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest

from schemas.contracts import Authority, Content, RecordKind, RetractionPayload
from services.sdk.client import ContextClient, RunHandle
from tests.support.flows import client, new_session
from tests.support.model_server import Script
from tests.support.services import Services

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

# The profile and policy: InputBudget 4,000 - 500 - 100 = 3,400.
PROFILE = {"name": "m4000", "context_capacity": 4000, "output_reserve": 500, "safety_margin": 100}
POLICY = {
    "recent_complete_groups": 1,
    "compaction": {"user_turns": 2, "context_ratio": None},
}
SECRET = "CONFIDENTIAL-CLAUSE-7"
Step = Callable[[RunHandle], Awaitable[None]]


@pytest.fixture
async def ctx(scripted: tuple[Services, Script]) -> AsyncIterator[ContextClient]:
    scripted[1].mode, scripted[1].delay_s, scripted[1].statement = "ok", 0.0, None
    scripted[1].hold = None
    try:
        async with client(scripted[0]) as c:
            yield c
    finally:  # a test that failed while the summarizer was held lets it answer
        if (hold := scripted[1].hold) is not None:
            hold.set()
            scripted[1].hold = None


@dataclass
class Scene:
    ctx: ContextClient
    db: asyncpg.Pool
    script: Script
    session: dict[str, Any]
    checks: int = 0  # Prepare checks made so far (each one a trigger report)
    estimates: list[int] = field(default_factory=list)  # the view after each question
    ended_on: dict[str, str | None] = field(default_factory=dict)  # run -> summary at its end

    @property
    def sid(self) -> str:
        return str(self.session["session_id"])

    async def prepare(self, run: RunHandle) -> dict[str, Any]:
        prepared = await self.ctx.prepare(run)
        self.checks += 1
        await self._reported(self.checks)
        return prepared

    async def _reported(self, n: int) -> None:
        for _ in range(400):
            got = await self.db.fetchval(
                "SELECT count(*) FROM trigger_reports WHERE session_id=$1"
                " AND event_key LIKE 'obs:%'",
                self.sid,
            )
            if got >= n:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"only {got} trigger reports, expected {n}")

    async def settled(self) -> list[Any]:
        """The session's jobs, once none is running."""
        for _ in range(600):
            jobs = await self.db.fetch(
                "SELECT j.*, o.model_calls FROM compaction_jobs j LEFT JOIN"
                " compaction_operations o USING (job_id) WHERE j.session_id=$1"
                " ORDER BY j.created_at",
                self.sid,
            )
            if all(j["status"] != "requested" for j in jobs):
                return jobs
            await asyncio.sleep(0.05)
        raise AssertionError(f"jobs still running: {[dict(j) for j in jobs]}")

    async def committed(self, event_key: str) -> None:
        """Until the processor committed ``event_key``'s record: the pre-emptive check of
        its batch, and the job that check starts, commit in the same transaction, so a
        ``settled`` after this sees that job."""
        for _ in range(600):
            if await self.db.fetchval(
                "SELECT 1 FROM records WHERE session_id=$1 AND event_key=$2", self.sid, event_key
            ):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{event_key} not committed\n{await self.story()}")

    async def withdrawn(self, kind: str) -> None:
        """Until the processor committed the session's withdrawal of ``kind``."""
        for _ in range(600):
            with contextlib.suppress(AssertionError):
                await _withdrawn_at(self, kind)
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {kind} committed\n{await self.story()}")

    def release(self) -> None:
        """Let the held summarizer answer, and answer at once from now on."""
        hold, self.script.hold = self.script.hold, None
        assert hold is not None, "the summarizer was not held"
        hold.set()

    async def question(
        self, tag: str, before: Step | None = None, after_result: Step | None = None
    ) -> RunHandle:
        """One question: checked at the question and after its tool result (R9.1), then
        answered; the run is finished once its jobs settled. ``before``: what the run
        appends first; ``after_result``: what it appends after the result's check."""
        c = self.ctx
        run = await c.start_run(self.session)
        if before is not None:
            await before(run)
        await c.append_user(run, f"Question {tag}?", f"{tag}-q")
        await self.prepare(run)
        call = f"{tag}-c"
        await c.append_model_result(
            run, f"Looking at {tag}.", f"{tag}-m1", [(call, "read_file", "{}")]
        )
        body = " ".join(f"{tag}row{j}={j * 7}" for j in range(40))
        await c.append_tool_outcome(run, call, "read_file", body)
        prepared = await self.prepare(run)
        if after_result is not None:
            await after_result(run)
        await c.append_model_result(run, f"{tag} read.", f"{tag}-m2")
        await self.committed(f"model:{tag}-m2")
        await self.settled()
        # The view once the question's jobs settled, as the processor holds it for the
        # next prepare: not the estimate of a prepare that may run before or after a job
        # commits (that one depends on timing, not on the view).
        held = await self.db.fetchval(
            "SELECT fixed_overhead + view_tokens FROM compaction_state"
            " WHERE session_id=$1 AND lineage='main'",
            self.sid,
        )
        self.estimates.append(
            int(held if held is not None else prepared["budget"]["estimated_input"])
        )
        self.ended_on[run.run_id] = await self.current_summary()
        await c.finish_run(run)
        return run

    async def reports_of(self, run: RunHandle) -> list[Any]:
        """The run's checks: Prepare's and the processor's pre-emptive ones."""
        return list(
            await self.db.fetch(
                "SELECT * FROM trigger_reports WHERE session_id=$1 AND run_id=$2"
                " ORDER BY report_id",
                self.sid,
                run.run_id,
            )
        )

    async def story(self) -> str:
        """The session's records, checks and jobs, for a failure message."""
        queries = (
            "SELECT session_sequence, record_id, kind, run_id, resource_ref FROM records",
            "SELECT event_key, run_id, decision, reason, job_id, view_watermark, fired,"
            " values FROM trigger_reports",
            "SELECT job_id, run_id, status, reason, request->>'view_watermark' AS w,"
            " request->>'parent_summary_id' AS parent FROM compaction_jobs",
            "SELECT summary_id, job_id, status, covered_record_ids FROM summary_revisions",
            "SELECT event_key, outcome, code FROM event_outcomes",
        )
        lines = []
        for sql in queries:
            for r in await self.db.fetch(sql + " WHERE session_id=$1", self.sid):
                lines.append(str(dict(r)))
        return "\n".join(lines)

    async def current_summary(self) -> str | None:
        sid: str | None = await self.db.fetchval(
            "SELECT current_summary_id FROM compaction_state WHERE session_id=$1"
            " AND lineage='main'",
            self.sid,
        )
        return sid


@pytest.fixture
async def scene(ctx: ContextClient, db: asyncpg.Pool, scripted: tuple[Services, Script]) -> Scene:
    session = await new_session(ctx, model_profile=PROFILE, context_policy=POLICY)
    return Scene(ctx, db, scripted[1], session)


async def _run_a_reads_the_document(s: Scene) -> None:
    """Run A: a tool result derived from ``doc@v3``."""
    c = s.ctx
    a = await c.start_run(s.session)
    await c.append_user(a, "What does the contract say?", "A-q")
    await s.prepare(a)
    await c.append_model_result(a, "Reading it.", "A-m", [("A-c", "read_file", "{}")])
    doc = f"{SECRET}: the fee is 42 units per call. " * 6
    await c.append_tool_outcome(a, "A-c", "read_file", doc, resource_ref="doc@v3")
    await s.prepare(a)
    await c.append_model_result(a, "The fee is 42 units.", "A-a")
    await s.settled()
    await c.finish_run(a)


async def _withdrawn_at(s: Scene, kind: str) -> int:
    """The session sequence of the session's withdrawal (a revocation or a retraction)."""
    seq = await s.db.fetchval(
        "SELECT session_sequence FROM records WHERE session_id=$1 AND kind=$2"
        + (" AND payload->>'active' = 'false'" if kind == "resource_activation" else ""),
        s.sid,
        kind,
    )
    assert seq is not None, await s.story()
    return int(seq)


async def _every_due_question_compacts(
    s: Scene, runs: list[RunHandle], hits: int, withdrawn: int
) -> None:
    """After the withdrawal at ``withdrawn``: each question due a compaction (one of its
    checks since then fired ``user_turns``) ends on a summary of its own job; no other
    question started one; every job since the withdrawal committed, and at most one job
    was refused — one that began before it (no ``version_conflict`` loop); one
    summarizer call per job (R9.4)."""
    jobs = [j for j in await s.settled() if j["run_id"] in {r.run_id for r in runs}]
    since = [j for j in jobs if int(j["request"]["view_watermark"]) >= withdrawn]
    due: list[int] = []  # the questions due a compaction, by their place after it
    for i, run in enumerate(runs):
        mine = [j["status"] for j in since if j["run_id"] == run.run_id]
        checks = [r for r in await s.reports_of(run) if r["view_watermark"] >= withdrawn]
        fired = any("user_turns" in r["fired"] for r in checks)
        assert mine in ([["committed"], []] if fired else [[]]), await s.story()
        if fired:
            ended = await s.db.fetchrow(
                "SELECT j.run_id, s.status FROM summary_revisions s JOIN compaction_jobs j"
                " USING (job_id) WHERE s.summary_id=$1",
                s.ended_on[run.run_id],
            )
            assert ended is not None and tuple(ended) == (run.run_id, "committed"), (
                f"{run.run_id}\n{await s.story()}"
            )
        if fired:
            due.append(i)
    # Five questions after the withdrawal with ``user_turns: 2``: every second one is due,
    # from run E or from run F (where the first compaction after it falls depends on
    # timing: seen for the retraction on a loaded machine).
    assert due in ([0, 2, 4], [1, 3]), f"questions due: {due}\n{await s.story()}"
    refused = [j for j in jobs if j["status"] != "committed"]
    assert len(refused) <= 1 and all(j not in since for j in refused), await s.story()
    assert [j["model_calls"] for j in jobs] == [1] * len(jobs)
    assert s.script.hits - hits == len(jobs)  # the summarizer, once per job
    st = await s.db.fetchrow(
        "SELECT * FROM compaction_state WHERE session_id=$1 AND lineage='main'", s.sid
    )
    assert st["deferral_reason"] is None and st["current_summary_id"] is not None
    # The view stays bounded: it never grows question after question towards the budget.
    assert max(s.estimates[-4:]) < s.estimates[-5] + 400, f"{s.estimates}\n{await s.story()}"


@pytest.mark.spec("R11.8", "R9.4", "R15.3")
async def test_after_a_revocation_every_due_question_compacts_once(scene: Scene) -> None:
    s = scene
    await _run_a_reads_the_document(s)
    await s.question("B")  # 2 questions: S1 covers run A's document
    s1 = await s.current_summary()
    assert s1 is not None
    await s.question("C")
    doc_id = await s.db.fetchval(
        "SELECT record_id FROM records WHERE session_id=$1 AND event_key='tool:A-c'", s.sid
    )
    covered = await s.db.fetchval(
        "SELECT covered_record_ids FROM summary_revisions WHERE summary_id=$1", s1
    )
    assert doc_id in covered

    async def revoke(run: RunHandle) -> None:
        # Run E inherits S1 and revokes the document first.
        inherited = await s.prepare(run)
        assert inherited["dependency_versions"]["summary_id"] == s1
        await s.ctx.revoke_resource(run, "document", "doc", "v3")

    hits = s.script.hits
    after = [await s.question("E", before=revoke)]
    status = await s.db.fetchval("SELECT status FROM summary_revisions WHERE summary_id=$1", s1)
    assert status == "invalidated"  # S1 dropped (R11.8)
    for tag in ("F", "G", "H", "I"):
        after.append(await s.question(tag))
    await _every_due_question_compacts(
        s, after, hits, await _withdrawn_at(s, "resource_activation")
    )
    # The rebuilt summaries never restate the withdrawn content.
    texts = await s.db.fetch(
        "SELECT summary_text FROM summary_revisions WHERE session_id=$1 AND status='committed'",
        s.sid,
    )
    assert texts and not any(SECRET in t["summary_text"] for t in texts)


@pytest.mark.spec("R11.8", "R9.4", "R15.3")
async def test_after_a_retraction_every_due_question_compacts_once(scene: Scene) -> None:
    """The same shape for a retraction (issue 15): run E retracts run B's answer while
    the job that covers it runs. That job is refused — the view changed under it — and
    exactly one job rebuilt on the new state follows and commits; every later question
    due a compaction gets one."""
    s = scene
    await _run_a_reads_the_document(s)
    await s.question("B")
    assert await s.current_summary() is not None
    await s.question("C")
    target = await s.db.fetchval(
        "SELECT record_id FROM records WHERE session_id=$1 AND event_key='model:B-m2'", s.sid
    )
    # The summarizer answers once the retraction is committed: the job started at run E
    # surely runs across it (a fixed delay did not, on a loaded machine).
    s.script.hold = threading.Event()

    async def retract(run: RunHandle) -> None:
        for _ in range(200):  # E's start is due: the processor starts a job at once
            if await s.db.fetchval(
                "SELECT count(*) FROM compaction_jobs WHERE run_id=$1 AND status='requested'",
                run.run_id,
            ):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("no job started at run E's start")
        await s.ctx.append(
            s.ctx._event(
                run,
                RecordKind.RECORD_RETRACTED,
                Authority.USER,
                Content.text(""),
                RetractionPayload(target, "undo"),
                f"retract:{target}",
                operation_id=target,
            )
        )
        await s.committed(f"retract:{target}")
        s.release()
        await s.settled()  # refused: it covers what was retracted while it ran

    hits = s.script.hits
    after = [await s.question("E", before=retract)]
    for tag in ("F", "G", "H", "I"):
        after.append(await s.question(tag))
    withdrawn = await _withdrawn_at(s, "record_retracted")
    await _every_due_question_compacts(s, after, hits, withdrawn)
    refused = await s.db.fetch(
        "SELECT reason, request FROM compaction_jobs WHERE session_id=$1 AND status <> 'committed'",
        s.sid,
    )
    assert [r["reason"] for r in refused] == ["version_conflict:resource_revoked"]
    assert int(refused[0]["request"]["view_watermark"]) < withdrawn  # it ran across it
    rows = await s.db.fetch(
        "SELECT covered_record_ids FROM summary_revisions WHERE session_id=$1"
        " AND status='committed'",
        s.sid,
    )
    assert not any(target in r["covered_record_ids"] for r in rows)


@pytest.mark.spec("R11.8", "R9.4", "R15.3")
async def test_a_revocation_while_a_job_runs_and_a_grant_again_never_stall_compaction(
    scene: Scene,
) -> None:
    """Grant changes: run E revokes ``doc@v3`` while the job extending S1 runs — that job
    is refused, exactly one job rebuilt on the new state follows and commits — and run F
    grants the document again; every later question due a compaction gets one."""
    s = scene
    await _run_a_reads_the_document(s)
    await s.question("B")
    assert await s.current_summary() is not None
    await s.question("C")
    s.script.hold = threading.Event()  # the summarizer answers once the revocation is in

    async def revoke(run: RunHandle) -> None:
        for _ in range(200):
            if await s.db.fetchval(
                "SELECT count(*) FROM compaction_jobs WHERE run_id=$1 AND status='requested'",
                run.run_id,
            ):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("no job started at run E's start")
        await s.ctx.revoke_resource(run, "document", "doc", "v3")
        await s.withdrawn("resource_activation")
        s.release()
        await s.settled()

    async def grant(run: RunHandle) -> None:
        await s.ctx.activate_resource(run, "document", "doc", "v3", "the document again")

    hits = s.script.hits
    after = [await s.question("E", before=revoke), await s.question("F", before=grant)]
    for tag in ("G", "H", "I"):
        after.append(await s.question(tag))
    withdrawn = await _withdrawn_at(s, "resource_activation")
    await _every_due_question_compacts(s, after, hits, withdrawn)
    refused = await s.db.fetch(
        "SELECT reason, request FROM compaction_jobs WHERE session_id=$1 AND status <> 'committed'",
        s.sid,
    )
    assert [r["reason"] for r in refused] == ["version_conflict:resource_revoked"]
    assert int(refused[0]["request"]["view_watermark"]) < withdrawn
