"""Decisions and open questions recorded through the SDK (issue 36), through the real
broker, database, processor and compaction worker: across at least ten compactions every
summary keeps each covered decision and question verbatim as an entry of its own citing
its record, a question leaves the open list only when a ``question_closed`` names it, bad
input is dead-lettered with its reason, and the inspector's read model lists them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from domain.compaction.drafts import SummaryDraft
from domain.planning.state import record_id_for
from schemas.contracts import Authority, Content, QuestionPayload, RecordKind
from services.sdk.client import ContextClient, RunHandle
from storage.records.authored import session_authored
from tests.integration.test_compaction import profile, round_, script, settled
from tests.integration.test_compaction_gain import checked_prepare
from tests.integration.test_poison import dead_letters_at
from tests.support.console import session_inspect, sign_in
from tests.support.flows import client, new_session
from tests.support.model_server import Script
from tests.support.services import TEST_SPACE, Services

pytestmark = pytest.mark.integration
__all__ = ["script"]  # the scripted model's fixture (test_compaction)

# Phrased with no cue word a text rule could key on, in several languages.
DECISIONS = [
    "Final call: PostgreSQL over SQLite for the job store.",
    "Settled: retries back off exponentially, capped at 30 s.",
    "采用方案二\uff1a按会话分区。",
    "Wir nehmen Avro statt JSON für das Topic.",
    "Логи пишем в stderr, не в файл.",
    "On garde le format de date ISO 8601.",
]
QUESTION_A = "Which port does the staging broker listen on?"
QUESTION_B = "谁负责审查架构变更\uff1f"  # a CJK question mark
ANSWER_A = "9093, TLS only"
MIN_COMPACTIONS = 10


@pytest.fixture
async def ctx(services: Services) -> AsyncIterator[ContextClient]:
    async with client(services) as c:
        yield c


async def _summaries(db: asyncpg.Pool, sid: str) -> list[Any]:
    return list(
        await db.fetch(
            "SELECT summary_id, summary, covered_record_ids FROM summary_revisions"
            " WHERE session_id=$1 AND status='committed' ORDER BY created_at",
            sid,
        )
    )


def _draft(row: Any) -> SummaryDraft:
    return SummaryDraft.from_dict(row["summary"])


async def _prepared_and_done(ctx: ContextClient, db: asyncpg.Pool, run: RunHandle) -> None:
    """A prepare, then until the processor has checked it (the job it starts, if any, is
    then in compaction_jobs) and no job of the session is running. Counting the jobs
    before the check lands would miss this question's job, and the next question would
    start two: a session with one more question (and recorded entry) than the summaries."""
    sid = run.session_id
    await checked_prepare(ctx, db, run, timeout=30)  # a new user turn: the trigger starts a job
    n = await db.fetchval("SELECT count(*) FROM compaction_jobs WHERE session_id=$1", sid)
    await settled(db, sid, timeout=30, at_least=n)


async def _question(ctx: ContextClient, session: dict[str, Any], i: int) -> RunHandle:
    """One question with a decision, a tool round and an answer; the first opens two
    questions, the third closes one of them."""
    run = await ctx.start_run(session)
    await ctx.append_user(run, f"Question number {i}: continue the migration.", f"q{i}")
    text = DECISIONS[i % len(DECISIONS)] + f" (#{i})"
    await ctx.record_decision(run, text, reason=f"measured in step {i}", event_key=f"d{i}")
    if i == 0:
        await ctx.open_question(run, QUESTION_A, event_key="qa")
        await ctx.open_question(run, QUESTION_B, event_key="qb", authority=Authority.USER)
    if i == 2:
        await ctx.close_question(run, "qa", answer=ANSWER_A, event_key="close-qa")
    await round_(ctx, run, f"r{i}")
    await ctx.append_model_result(run, f"Done with step {i}.", f"end{i}")
    return run


@pytest.mark.spec("R11.7", "R11.8", "R16")
async def test_recorded_decisions_and_questions_stay_verbatim_and_cited_across_ten_compactions(
    ctx: ContextClient, db: asyncpg.Pool
) -> None:
    """A budget small enough that the history outgrows the summary's bound: the built-in
    summarizer then summarizes the covered records again (``rollup.rederived``), read
    back from PostgreSQL, and keeps every recorded entry as a roll-up would.

    The budget (a ~720-token summary bound) leaves the tenth summary's recorded entries
    room for three to five plain facts besides them. At 4k (~600) it left one or none,
    so one question more than the summaries, or record ids that tokenize long (14-29
    tokens each, by their hash), could push a recorded entry out: the test failed now
    and then."""
    sid = await _kept_across(ctx, db, MIN_COMPACTIONS, profile(4_800))
    rollups = await db.fetch(
        "SELECT rollup FROM summary_revisions WHERE session_id=$1 AND rollup IS NOT NULL", sid
    )
    rederived = [r["rollup"] for r in rollups if "rederived" in r["rollup"]]
    assert rederived and all(r["rederived"] > 0 for r in rederived), rollups


@pytest.mark.spec("R11.3", "R11.7", "R11.8")
async def test_a_model_summarizer_that_ignores_them_still_leaves_them_verbatim_and_cited(
    scripted: tuple[Services, Script], script: Script, db: asyncpg.Pool
) -> None:
    """The scripted model answers one filler fact per segment, never a decision or a
    question: the recorded entries are the worker's, not the model's."""
    async with client(scripted[0]) as c:
        await _kept_across(c, db, 4)
    assert script.hits >= 4


async def _kept_across(
    ctx: ContextClient, db: asyncpg.Pool, compactions: int, model: dict[str, Any] | None = None
) -> str:
    """Questions with decisions (and two questions, one closed later) until the session
    has ``compactions`` committed summaries; then every summary is checked."""
    session = await new_session(
        ctx,
        context_policy={
            "recent_complete_groups": 1,
            "compaction": {"context_ratio": None, "user_turns": 1},
        },
        **({"model_profile": model} if model else {}),
    )
    sid = session["session_id"]

    def rid(key: str) -> str:
        return record_id_for(TEST_SPACE, sid, key)

    i = 0
    while i < 40 and len(await _summaries(db, sid)) < compactions:
        run = await _question(ctx, session, i)
        await _prepared_and_done(ctx, db, run)
        await ctx.finish_run(run)
        i += 1
    summaries = await _summaries(db, sid)
    assert len(summaries) >= compactions, (i, len(summaries))

    decisions = {rid(f"d{n}"): DECISIONS[n % len(DECISIONS)] + f" (#{n})" for n in range(i)}
    closed_in: str | None = None
    for row in summaries:
        covered = set(row["covered_record_ids"])
        draft = _draft(row)
        text = draft.text()
        for record_id, decision in decisions.items():
            if record_id not in covered:
                continue
            entries = [f for f in draft.decisions if f.source_ids == (record_id,)]
            assert len(entries) == 1, (row["summary_id"], decision, draft.decisions)
            (entry,) = entries
            assert entry.origin == "recorded" and entry.statement.startswith(decision)
            assert f"- {decision}" in text and record_id in text
        open_keys = [f.key for f in draft.unresolved_questions if f.origin == "recorded"]
        if rid("qb") in covered:  # never closed: open in every summary that covers it
            assert "qb" in open_keys
            assert any(f.statement == QUESTION_B for f in draft.unresolved_questions)
        if rid("qa") in covered and rid("close-qa") not in covered:
            assert "qa" in open_keys
        if rid("close-qa") in covered:
            closed_in = closed_in or row["summary_id"]
            assert "qa" not in open_keys
            answered = [f for f in draft.verified_facts if f.key == "qa"]
            assert len(answered) == 1, draft.verified_facts
            assert answered[0].statement == f"{QUESTION_A} — answered: {ANSWER_A}"
            assert answered[0].source_ids == (rid("qa"), rid("close-qa"))
    assert closed_in is not None  # the closing was covered, and later summaries keep it closed

    # The inspector's read model: every decision, one question open, one answered.
    authored = await session_authored(db, sid)
    assert [d.text for d in authored.decisions] == list(decisions.values())
    assert [(q.key, q.status, q.answer) for q in authored.questions] == [
        ("qa", "closed", ANSWER_A),
        ("qb", "open", None),
    ]
    assert authored.questions[1].authority == "user"
    return str(sid)


@pytest.mark.spec("R3.1", "R3.3")
async def test_bad_decisions_and_questions_are_dead_lettered_with_their_reason(
    ctx: ContextClient, services: Services, db: asyncpg.Pool
) -> None:
    session = await new_session(ctx)
    run = await ctx.start_run(session)
    empty = await ctx.record_decision(run, "   ", event_key="d-empty")
    misnamed = await ctx.append(
        ctx._event(
            run,
            RecordKind.QUESTION_OPENED,
            Authority.MODEL,
            Content.text("Which one?"),
            QuestionPayload("another-key"),
            "q-misnamed",
        )
    )
    self_closing = await ctx.close_question(run, "c-self", event_key="c-self")
    letters = await dead_letters_at(services, {empty, misnamed, self_closing})
    assert sorted(dl.reason_code for dl in letters.values()) == [
        "bad_decision",
        "bad_question",
        "bad_question",
    ]
    # A retried open is no second record; the pipeline flows on.
    await ctx.open_question(run, "Is the cache warm?", event_key="q-ok")
    await ctx.open_question(run, "Is the cache warm?", event_key="q-ok")
    await ctx.append_user(run, "Go on.", "u1")
    await ctx.prepare(run)  # read-your-writes: every append above is decided
    sid = session["session_id"]
    kinds = await db.fetch(
        "SELECT kind FROM records WHERE session_id=$1 AND kind LIKE 'question%'", sid
    )
    assert [r["kind"] for r in kinds] == ["question_opened"]


@pytest.mark.spec("R18", "R11.7")
async def test_the_inspector_and_session_inspect_list_decisions_and_questions(
    ctx: ContextClient, db: asyncpg.Pool, pg_dsn: str, console: str, services: Services
) -> None:
    session = await new_session(ctx)
    sid = session["session_id"]
    run = await ctx.start_run(session)
    await ctx.append_user(run, "Pick the store.", "q1")
    await ctx.record_decision(run, DECISIONS[2], reason="热点少", event_key="d1")
    await ctx.open_question(run, QUESTION_A, event_key="qa")
    await ctx.open_question(run, QUESTION_B, event_key="qb")
    await ctx.close_question(run, "qa", answer=ANSWER_A, event_key="close-qa")
    await ctx.close_question(run, "q-never-opened", event_key="close-none")
    await ctx.prepare(run)  # read-your-writes: all of them are committed

    got = json.loads(session_inspect(pg_dsn, sid, "--json"))["authored"]
    assert [(d["text"], d["reason"]) for d in got["decisions"]] == [(DECISIONS[2], "热点少")]
    assert [(q["key"], q["status"], q["answer"]) for q in got["questions"]] == [
        ("qa", "closed", ANSWER_A),
        ("qb", "open", None),
    ]
    rid = record_id_for(TEST_SPACE, sid, "close-none")
    assert got["unmatched_closings"] == [rid]  # named apart, never dropped silently
    table = session_inspect(pg_dsn, sid)
    for line in (
        "decisions recorded: 1",
        f"- {DECISIONS[2]} (reason: 热点少)",
        "questions: 1 open of 2",
        f"[closed] {QUESTION_A} (qa,",
        f"— answered: {ANSWER_A} by {record_id_for(TEST_SPACE, sid, 'close-qa')}",
        f"[open] {QUESTION_B} (qb,",
        rid,
    ):
        assert line in table, (line, table)

    async with httpx.AsyncClient(base_url=console, timeout=30) as http:
        await sign_in(http, services.api_key)
        page = await http.get(f"/inspector/sessions/{sid}")
        assert page.status_code == 200, page.text
    decisions = page.text.split('id="decisions"')[1].split("</table>")[0]
    assert DECISIONS[2] in decisions and "热点少" in decisions
    questions = page.text.split('id="questions"')[1].split("</table>")[0]
    closed = questions.split('class="question-closed"')[1].split("</tr>")[0]
    assert QUESTION_A in closed and ANSWER_A in closed
    assert QUESTION_B in questions.split('class="question-open"')[1].split("</tr>")[0]
    assert "1 open of 2." in page.text
