"""The execution frontier through the real stack (issue 24; SPEC R4.4, R11.4-R11.6, R13.1):
a thread's plan and the session's user constraints are state of record, rendered verbatim
as required blocks of every action context, with their versions, whatever compaction did
to the history around them."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from schemas.contracts import Authority, Content, RecordKind, UserInputPayload, Visibility
from services.sdk.client import ContextClient, RunHandle
from storage.records.frontier import read_frontier
from storage.records.thread_frontier import FrontierQuery, TaskCount, own_and_frontier
from storage.records.threads import run_snapshot as snapshot
from storage.records.threads import thread_records
from tests.integration.test_compaction import round_, script, settled
from tests.integration.test_poison import dead_letters_at
from tests.support.flows import client, new_session
from tests.support.model_server import Script
from tests.support.services import Services

pytestmark = pytest.mark.integration
__all__ = ["script"]  # the scripted model's fixture, used here too

PLAN_V1 = [
    {"id": "p1", "step": "read the parser module", "status": "in_progress"},
    {"id": "p2", "step": "write the failing test", "status": "pending"},
]
PLAN_V2 = [
    {"id": "p1", "step": "read the parser module", "status": "done"},
    {"id": "p2", "step": "write the failing test", "status": "in_progress"},
    {"id": "p3", "step": "fix the tokenizer bug", "status": "pending"},
]


@pytest.fixture
async def ctx(services: Services) -> AsyncIterator[ContextClient]:
    async with client(services) as c:
        yield c


def block(prepared: dict[str, Any], kind: str) -> dict[str, Any] | None:
    found = [m for m in prepared["messages"] if m.get("block") == kind]
    assert len(found) <= 1, found
    return found[0] if found else None


def everything(prepared: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in prepared["messages"])


def assert_no_old_status_as_current(prepared: dict[str, Any], items: list[dict[str, Any]]) -> None:
    """R11.4: every summary line that names a current plan item is dated to the plan it was
    written under, and the summary as a whole says when it was written."""
    summary = block(prepared, "summary")
    assert summary is not None
    text = summary["content"]
    assert "(written at plan v" in text
    names = [str(i.get("step") or i.get("text")).casefold() for i in items]
    naming = [ln for ln in text.splitlines() if any(n in ln.casefold() for n in names)]
    assert all(ln.startswith("- earlier (plan v") for ln in naming), naming


async def compacted(db: asyncpg.Pool, sid: str, n: int) -> None:
    jobs = await settled(db, sid, timeout=30, at_least=n)
    assert [j["status"] for j in jobs].count("committed") >= n, [dict(j) for j in jobs]


@pytest.mark.spec("R4.4", "R11.5", "R11.6", "R19")
async def test_a_plan_update_after_a_compaction_shows_the_new_plan_never_the_summarys(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(
        ctx,
        context_policy={
            "recent_complete_groups": 1,
            "compaction": {"context_ratio": None, "model_steps": 4},
        },
    )
    sid = session["session_id"]
    run = await ctx.start_run(session)
    await ctx.append_user(run, "Fix the tokenizer bug.", "q1")
    await ctx.update_plan(run, PLAN_V1, event_key="plan:call-1")
    await ctx.append_model_result(
        run, "Plan: read the parser module is in progress.", "m-plan"
    )  # the model's own account of the plan, in history
    for i in range(3):
        await round_(ctx, run, f"r{i}")
    first = await ctx.prepare(run)  # 7 steps: the step trigger starts a job
    plan = block(first, "plan")
    assert plan is not None and plan["retention"] == "required" and plan["category"] == "task"
    assert "1. [in_progress] read the parser module" in plan["content"]
    assert first["dependency_versions"]["plan_version"] == 1
    await compacted(db, sid, 1)
    await ctx.update_plan(run, PLAN_V2, event_key="plan:call-2")
    await ctx.update_plan(run, PLAN_V2, event_key="plan:call-2")  # a retry: no new version
    after = await ctx.prepare(run)
    assert block(after, "summary") is not None
    plan = block(after, "plan")
    assert plan is not None and plan["block_id"] == "plan:v2"
    for n, item in enumerate(PLAN_V2, 1):
        assert f"{n}. [{item['status']}] {item['step']} (id {item['id']})" in plan["content"]
    assert after["dependency_versions"]["plan_version"] == 2
    assert after["frontier"]["plan"]["items"][0]["status"] == "done"
    # The frontier follows the thread: the messages before it are a stable prefix.
    kinds = [m.get("block") for m in after["messages"]]
    assert kinds.index("plan") > kinds.index("summary")
    assert all(k in ("plan", "constraints", "material") for k in kinds[kinds.index("plan") :])
    protected = {p["block_id"] for p in after["protected_block_manifest"]}
    assert "plan:v2" in protected
    assert_no_old_status_as_current(after, PLAN_V2)


@pytest.mark.spec("R4.4", "R11.5", "R19")
async def test_a_retired_constraint_disappears_and_a_repeated_one_appears_once_with_its_new_version(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(ctx)
    # Declared on the session before its first run: no run needed for a session constraint.
    await ctx.set_constraint(session, "Answer in English.", constraint_id="lang")
    run = await ctx.start_run(session)
    await ctx.append_user(run, "Never use tabs for indentation.", "q1", constraint=True)
    await ctx.set_constraint(run, "Keep answers under 200 words.", constraint_id="short")
    p = await ctx.prepare(run)
    c = block(p, "constraints")
    assert c is not None and c["retention"] == "required"
    lines = c["content"].splitlines()[1:]
    assert lines == [
        "- Answer in English.",
        "- Never use tabs for indentation.",
        "- Keep answers under 200 words.",
    ]
    by_id = {x["constraint_id"]: x for x in p["frontier"]["constraints"]}
    assert by_id["lang"]["version"] == 1
    q1 = next(x for x in by_id.values() if x["text"].startswith("Never"))
    assert q1["source_record_id"] is not None  # the user input it came from
    await ctx.retire_constraint(run, "short")
    await ctx.append_user(
        run, "never use TABS for indentation", "q1-again", supplement=True, constraint=True
    )  # the user repeats the rule
    await ctx.set_constraint(run, "Answer in British English.", constraint_id="lang")
    p = await ctx.prepare(run)
    c = block(p, "constraints")
    assert c is not None
    text = c["content"]
    assert "Keep answers under 200 words." not in text
    assert text.lower().count("never use tabs for indentation") == 1
    assert "- Answer in British English." in text and "- Answer in English." not in text
    by_id = {x["constraint_id"]: x for x in p["frontier"]["constraints"]}
    assert by_id["lang"]["version"] == 2 and "short" not in by_id
    assert by_id[q1["constraint_id"]]["version"] == 2
    versions = p["dependency_versions"]
    assert versions["constraints_version"] == 6  # 5 declarations and 1 retirement
    # A new run of the session keeps them; a run-scoped one ends with its run.
    await ctx.set_constraint(run, "Only touch tests/ in this run.", scope="run")
    p = await ctx.prepare(run)
    assert "Only touch tests/ in this run." in block(p, "constraints")["content"]  # type: ignore[index]
    await ctx.finish_run(run)
    nxt = await ctx.start_run(session)
    await ctx.append_user(nxt, "Next question.", "q2")
    p = await ctx.prepare(nxt)
    text = block(p, "constraints")["content"]  # type: ignore[index]
    assert "Only touch tests/ in this run." not in text and "- Answer in British English." in text


@pytest.mark.spec("R13.1", "R4.4", "R19")
async def test_a_childs_plan_is_its_own_and_it_inherits_the_constraints(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(ctx)
    run = await ctx.start_run(session)
    await ctx.append_user(run, "Delegate the reading.", "q1")
    await ctx.set_constraint(run, "Never push to main.", constraint_id="no-push")
    await ctx.update_plan(run, PLAN_V1, event_key="plan:parent")
    child: RunHandle = await ctx.export_for_child(run, "child-reader-1", [])
    await ctx.append_user(child, "Read the three files.", "child-task")
    await ctx.update_plan(
        child, [{"id": "c1", "step": "read file one", "status": "in_progress"}], "plan:child"
    )
    mine = await ctx.prepare(child)
    plan = block(mine, "plan")
    assert plan is not None and "read file one" in plan["content"]
    assert "read the parser module" not in everything(mine)
    assert mine["dependency_versions"]["plan_version"] == 1
    assert "- Never push to main." in block(mine, "constraints")["content"]  # type: ignore[index]
    parent = await ctx.prepare(run)
    assert "read file one" not in everything(parent)
    assert "read the parser module" in block(parent, "plan")["content"]  # type: ignore[index]
    # Prepare reads a thread's new records and its frontier in one statement: the same
    # as each read apart, for the child and the main thread, with and without records.
    sid = session["session_id"]
    async with db.acquire() as conn:
        for inst, child_ in ((child.instance_id, True), (run.instance_id, False)):
            for after in (0, 10**9):
                apart = await thread_records(conn, sid, run.run_id, inst, after)
                frontier = await read_frontier(conn, sid, run.run_id, inst, child=child_)
                query = FrontierQuery(child_)
                own, both, tasks = await own_and_frontier(conn, sid, run.run_id, inst, after, query)
                assert (own, both) == (apart, frontier) and (after > 0 or apart)
                assert tasks.inputs == frontier.task_version
    await asyncio.sleep(0)


@pytest.mark.spec("R11.6")
async def test_a_threads_task_count_continues_from_the_count_read_before(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    """Prepare keeps each thread's task count as read and counts only the inputs since
    (a long thread's thousands are not counted again at every prepare): the same count
    as one read from scratch, main thread and child alike."""
    session = await new_session(ctx)
    run = await ctx.start_run(session)
    await ctx.append_user(run, "First question.", "q1")
    child: RunHandle = await ctx.export_for_child(run, "child-counted", [])
    await ctx.append_user(child, "The child's task.", "child-task")
    await ctx.prepare(child)  # everything above committed
    sid = session["session_id"]
    threads = ((run.instance_id, False), (child.instance_id, True))
    async with db.acquire() as conn:
        before = {
            inst: (await own_and_frontier(conn, sid, run.run_id, inst, 0, FrontierQuery(c)))[2]
            for inst, c in threads
        }
    assert before[run.instance_id].inputs == 1 and before[child.instance_id].inputs == 1
    await ctx.append_user(run, "Second question.", "q2")
    await ctx.append_user(run, "And a supplement.", "s1", supplement=True)
    await ctx.append_user(child, "More for the child.", "child-task-2")
    await ctx.prepare(run)
    await ctx.prepare(child)
    async with db.acquire() as conn:
        for inst, c in threads:
            query = FrontierQuery(c)
            _, fresh, scratch = await own_and_frontier(conn, sid, run.run_id, inst, 0, query)
            _, _, continued = await own_and_frontier(
                conn, sid, run.run_id, inst, 0, query, before[inst]
            )
            assert continued == scratch and continued.inputs == fresh.task_version
            assert continued.through > before[inst].through
            assert continued.inputs == (3 if inst == run.instance_id else 2)


@pytest.mark.spec("R11.6", "R2.1", "R2.5")
async def test_a_new_runs_task_count_continues_the_sessions_inherited_inputs(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    """Issue 37: a new question's first prepare counted every input of the session again
    (2.4 ms at 1,080 records). A main thread's read also counts the inherited inputs
    through its run's snapshot, whatever the run, and a later run's first read continues
    from them: the same count as one read from scratch — private inputs of other runs,
    a child's inputs and supplements among them — and a count past a run's snapshot
    (its own, continued) gives no inherited inputs."""
    session = await new_session(ctx)
    sid = session["session_id"]
    runs: list[RunHandle] = []
    for q in range(4):
        run = await ctx.start_run(session)
        runs.append(run)
        await ctx.append_user(run, f"Question {q}.", f"q{q}")
        await ctx.append_user(run, f"More on {q}.", f"s{q}", supplement=True)
        ev = ctx._event(
            run, RecordKind.USER_INPUT, Authority.USER, Content.text("mine"), UserInputPayload(),
            f"private-{q}",
        )  # fmt: skip
        await ctx.append(dataclasses.replace(ev, visibility=Visibility.PRIVATE))
        if q == 1:
            child = await ctx.export_for_child(run, f"child-{q}", [])
            await ctx.append_user(child, "The child's task.", f"child-{q}")
        await ctx.prepare(run)  # committed
        await ctx.finish_run(run)
    async with db.acquire() as conn:
        seed = None
        for run in runs:
            query = FrontierQuery(False, inherited=True)
            args = (conn, sid, run.run_id, run.instance_id, 0, query)
            _, _, scratch = await own_and_frontier(*args)
            _, _, seeded = await own_and_frontier(*args, seed)
            assert seeded == scratch and scratch.inherited is not None
            assert scratch.inputs == scratch.inherited + 3  # its own three, then the rest
            snap = await snapshot(conn, sid, run.run_id)
            assert snap is not None
            seed = TaskCount(snap.through_session_sequence, scratch.inherited)
            _, _, past = await own_and_frontier(*args, scratch)
            assert past[:2] == scratch[:2] and past.inherited is None
        assert seed is not None and seed.inputs == 6  # 2 session-visible a run before


# --- a model summarizer (the scripted OpenAI-compatible server of test_compaction) --------


@pytest.fixture
async def model_ctx(scripted: tuple[Services, Script]) -> AsyncIterator[ContextClient]:
    async with client(scripted[0]) as c:
        yield c


async def _planned_question(c: ContextClient, steps: int) -> tuple[str, RunHandle]:
    session = await new_session(
        c,
        context_policy={
            "recent_complete_groups": 1,
            "compaction": {"context_ratio": None, "model_steps": steps},
        },
    )
    run = await c.start_run(session)
    await c.append_user(run, "Fix the tokenizer bug.", "q1")
    await c.update_plan(run, PLAN_V2, event_key="plan:1")
    await c.set_constraint(run, "Never push to main.", constraint_id="no-push")
    for i in range(3):
        await round_(c, run, f"r{i}")
    return session["session_id"], run


@pytest.mark.spec("R11.4", "R19")
@pytest.mark.parametrize(
    ("statement", "item_id"),
    [
        ("Read the parser module is still in progress.", "p1"),  # the plan: done
        ("Decision: fix the tokenizer bug — dropped the regex approach", "p3"),
        ("Write the failing test: done in 3 s", "p2"),
        ("Step 1 is done and the lexer is read.", None),  # names no item: the heading dates it
    ],
)
async def test_a_true_sentence_about_the_plan_never_fails_a_job_it_is_dated_and_recorded(
    model_ctx: ContextClient, db: asyncpg.Pool, script: Script, statement: str, item_id: str | None
) -> None:
    script.statement = statement
    sid, run = await _planned_question(model_ctx, 4)
    await model_ctx.prepare(run)
    (job,) = await settled(db, sid, timeout=30)
    assert (job["status"], job["reason"]) == ("committed", None), dict(job)
    # The summarizer was shown the plan as state of record.
    prompt = script.requests[-1]["messages"][-1]["content"]
    assert "[done] read the parser module (id p1)" in prompt
    row = await db.fetchrow(
        "SELECT summary_text, text_rules FROM summary_revisions WHERE job_id=$1", job["job_id"]
    )
    rules = [r for r in row["text_rules"] if r["rule"] == "plan_item_named"]
    assert [r["item_id"] for r in rules] == ([item_id] if item_id else [])
    assert row["summary_text"].startswith("(written at plan v1: ")
    after = await model_ctx.prepare(run)
    summary = block(after, "summary")
    assert summary is not None and "(written at plan v1: " in summary["content"]
    if item_id:
        assert f"earlier (plan v1): {statement}" in summary["content"]
    assert "1. [done] read the parser module (id p1)" in block(after, "plan")["content"]  # type: ignore[index]


@pytest.mark.spec("R11.6", "R19")
@pytest.mark.parametrize(
    ("change", "status", "reason"),
    [
        ("constraint", "rejected", "version_conflict:constraints"),
        ("plan", "committed", None),  # the plan moved; the summary does not restate it
        # what the summary says of the item is dated to plan v1: history, no conflict
        ("contradicting_plan", "committed", None),
    ],
)
async def test_a_commit_whose_frontier_versions_moved_is_decided_as_r11_6_says(
    model_ctx: ContextClient,
    db: asyncpg.Pool,
    script: Script,
    change: str,
    status: str,
    reason: str | None,
) -> None:
    script.delay_s = 2.0  # the model is slow: the frontier moves while the job runs
    script.statement = "Fix the tokenizer bug is pending; the lexer is read."
    sid, run = await _planned_question(model_ctx, 4)
    await model_ctx.prepare(run)
    for _ in range(100):  # until the job runs
        if await db.fetchval("SELECT count(*) FROM compaction_jobs WHERE session_id=$1", sid):
            break
        await asyncio.sleep(0.05)
    if change == "constraint":
        await model_ctx.set_constraint(run, "Answer in English.", constraint_id="lang")
    elif change == "plan":
        await model_ctx.update_plan(run, [*PLAN_V2[:2], {**PLAN_V2[2], "id": "p4"}], "plan:2")
    else:  # the tokenizer bug is now in progress: the summary's "pending" contradicts it
        moved = [*PLAN_V2[:2], {**PLAN_V2[2], "status": "in_progress"}]
        await model_ctx.update_plan(run, moved, "plan:2")
    (job,) = await settled(db, sid, timeout=30)
    assert (job["status"], job["reason"]) == (status, reason), dict(job)
    request = job["request"]
    assert (request["plan_version"], request["constraints_version"]) == (1, 1)
    if status == "committed":  # right after the plan update, the summary is dated
        plan = await model_ctx.prepare(run)
        assert_no_old_status_as_current(plan, plan["frontier"]["plan"]["items"])


@pytest.mark.spec("R11.5", "R4.4", "R19")
async def test_a_retired_constraint_never_comes_back_through_the_summary(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(
        ctx,
        context_policy={
            "recent_complete_groups": 1,
            "compaction": {"context_ratio": None, "user_turns": 2},
        },
    )
    sid = session["session_id"]
    first = await ctx.start_run(session)
    await ctx.append_user(first, "Never use tabs for indentation.", "q1", constraint=True)
    await round_(ctx, first, "a")
    await ctx.finish_run(first)
    run = await ctx.start_run(session)
    await ctx.append_user(run, "Now format the parser module.", "q2")
    p = await ctx.prepare(run)  # the second question: a job summarizes the first
    cid = p["frontier"]["constraints"][0]["constraint_id"]
    await compacted(db, sid, 1)
    await ctx.retire_constraint(run, cid)
    after = await ctx.prepare(run)
    summary = block(after, "summary")
    assert summary is not None and "user constraint" in summary["content"]
    assert "tabs" not in everything(after).lower()  # not in the summary, block or history
    assert block(after, "constraints") is None


@pytest.mark.spec("R13.1", "R13.2")
async def test_a_child_of_a_release_that_does_not_inherit_constraints_sees_only_its_own(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(
        ctx, context_policy={"child_transfer_policy": {"inherit_constraints": False}}
    )
    run = await ctx.start_run(session)
    await ctx.append_user(run, "Delegate the reading.", "q1")
    await ctx.set_constraint(run, "Never push to main.", constraint_id="no-push")
    child = await ctx.export_for_child(run, "child-reader-1", [])
    await ctx.append_user(child, "Read the file.", "child-task")
    assert block(await ctx.prepare(child), "constraints") is None
    await ctx.set_constraint(child, "Only read, never write.", constraint_id="read-only")
    mine = block(await ctx.prepare(child), "constraints")
    assert mine is not None and mine["content"].splitlines()[1:] == ["- Only read, never write."]
    parent = block(await ctx.prepare(run), "constraints")
    assert parent is not None and "Only read" not in parent["content"]


@pytest.mark.spec("R4.4", "R4.3")
async def test_a_plan_update_rewrites_only_the_end_of_the_request(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    """The prompt-cache prefix: what came before the frontier blocks in one call is, word
    for word, the start of the next, though the plan changed in between."""
    session = await new_session(ctx)
    run = await ctx.start_run(session)
    await ctx.append_user(run, "Fix the tokenizer bug.", "q1")
    await ctx.set_constraint(run, "Never push to main.", constraint_id="no-push")
    await ctx.update_plan(run, PLAN_V1, event_key="plan:1")
    await round_(ctx, run, "a")
    before = await ctx.prepare(run)
    await ctx.update_plan(run, PLAN_V2, event_key="plan:2")
    await round_(ctx, run, "b")
    after = await ctx.prepare(run)

    def shown(p: dict[str, Any]) -> list[tuple[str, str]]:
        return [(m["role"], str(m.get("content"))) for m in p["messages"]]

    head = [m.get("block") for m in before["messages"]].index("constraints")
    assert shown(after)[:head] == shown(before)[:head]
    assert len(after["messages"]) > len(before["messages"])
    assert block(after, "plan")["block_id"] == "plan:v2"  # type: ignore[index]


@pytest.mark.spec("R4.4", "R19")
async def test_retiring_a_constraint_never_set_is_dead_lettered_with_its_reason(
    ctx: ContextClient, db: asyncpg.Pool, services: Services
) -> None:
    session = await new_session(ctx)
    run = await ctx.start_run(session)
    await ctx.set_constraint(run, "Never push to main.", constraint_id="no-push")
    at = await ctx.retire_constraint(run, "no-pushh", event_key="retire-typo")
    letters = await dead_letters_at(services, {at})
    assert [dl.reason_code for dl in letters.values()] == ["constraint_unknown"]
    await ctx.append_user(run, "Go on.", "q1")
    p = await ctx.prepare(run)  # the pipeline flows and the rule still holds
    assert "- Never push to main." in block(p, "constraints")["content"]  # type: ignore[index]


@pytest.mark.spec("R2.5", "R4.4", "R19")
async def test_a_resumed_run_sees_its_own_plan_not_a_later_runs(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    session = await new_session(ctx)
    a = await ctx.start_run(session)
    await ctx.append_user(a, "Question a.", "qa")
    await ctx.update_plan(a, PLAN_V1, event_key="plan:a")
    await ctx.set_constraint(a, "Answer in French.", constraint_id="fr")
    await ctx.finish_run(a)
    b = await ctx.start_run(session)
    await ctx.append_user(b, "Question b.", "qb")
    await ctx.update_plan(b, PLAN_V2, event_key="plan:b")
    await ctx.retire_constraint(b, "fr")  # the session's rule, retired in a later run
    await ctx.set_constraint(b, "Answer in English.", constraint_id="en")
    seen_b = await ctx.prepare(b)
    assert seen_b["dependency_versions"]["plan_version"] == 2  # a's plan, then its own
    await ctx.finish_run(b)
    await ctx.resume_run(a)
    await ctx.append_user(a, "Back to a.", "qa2", supplement=True)
    seen_a = await ctx.prepare(a)
    plan = block(seen_a, "plan")
    assert plan is not None and plan["block_id"] == "plan:v1", plan
    assert "fix the tokenizer bug" not in everything(seen_a)  # only b's plan has it
    rules = block(seen_a, "constraints")  # the session's rules as they are now
    assert rules is not None and rules["content"].splitlines()[1:] == ["- Answer in English."]


@pytest.mark.spec("R4.4", "R19")
async def test_a_constraint_whose_source_input_is_retracted_is_withdrawn(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    from schemas.contracts import Authority, Content, RecordKind, RetractionPayload

    session = await new_session(ctx)
    run = await ctx.start_run(session)
    await ctx.append_user(run, "Never use tabs for indentation.", "q1", constraint=True)
    p = await ctx.prepare(run)
    source = p["frontier"]["constraints"][0]["source_record_id"]
    await ctx.append(
        ctx._event(
            run,
            RecordKind.RECORD_RETRACTED,
            Authority.USER,
            Content.text(""),
            RetractionPayload(source, "undo"),
            f"retract:{source}",
            operation_id=source,
        )
    )
    await ctx.append_user(run, "Go on.", "q2", supplement=True)
    after = await ctx.prepare(run)
    assert block(after, "constraints") is None
    assert "tabs" not in everything(after).lower()
