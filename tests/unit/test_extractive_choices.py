"""Decisions and open questions are first-class entries of the built-in summary (issue
24): a line of their own section, citing their record, from a guaranteed share of the
output budget, one-shot and through roll-ups. Pure."""

from __future__ import annotations

import pytest

from domain.compaction import salience as sal
from domain.compaction.bound import concat, rollup_items
from domain.compaction.drafts import SourceItem, SummaryDraft, SummaryRequest
from domain.compaction.extractive import extract_draft
from domain.compaction.validate import validate_draft
from tests.unit.test_extractive import Seg, line_with


def noisy_output(k: int) -> str:
    """A tool result full of salient-looking things: paths, numbers, an error."""
    rows = [
        f"src/mod{k}/part{i}.py:{i}: total = {i * 7}.5 ms in handler_{k}_{i}" for i in range(40)
    ]
    return "\n".join([*rows, f"ERROR worker_{k}: E{4000 + k} lock wait exceeded after {k}.5 s"])


def busy_with_choices() -> tuple[Seg, dict[str, str]]:
    """A segment of many tool outputs with a few decisions and open questions in the
    user's and the assistant's words; their text -> the record that holds it."""
    s = Seg()
    where: dict[str, str] = {}
    where["Use httpx instead of requests in fetch_rates()"] = s.user(
        "Why is the FX sync slow? Use httpx instead of requests in fetch_rates(). "
        "TODO: find out whether the nightly job calls fetch_rates() too."
    )
    for k in range(12):
        text = "Reading the next module."
        if k == 3:
            text = "We decided to batch the ledger writes in groups of 500 instead of a rewrite."
            where["We decided to batch the ledger writes in groups of 500"] = ""
        if k == 7:
            text = "It is still unclear whether merge_ledger() runs before the backfill."
        step, (call,) = s.step(text, ("read_file", {"path": f"src/ledger/step_{k}.py"}))
        if k == 3:
            where["We decided to batch the ledger writes in groups of 500"] = step
        if k == 7:
            where["It is still unclear whether merge_ledger() runs before the backfill"] = step
        s.outcome(call, "grep", noisy_output(k))
    answer = "Fetching is slow because of the pool. Which queue does reconcile_fx() use?"
    where["Which queue does reconcile_fx() use?"] = s.answer(answer)
    return s, where


SECTION = {
    "Use httpx instead of requests in fetch_rates()": "decisions",
    "We decided to batch the ledger writes in groups of 500": "decisions",
    "It is still unclear whether merge_ledger() runs before the backfill": "unresolved_questions",
    "TODO: find out whether the nightly job calls fetch_rates() too": "unresolved_questions",
    "Which queue does reconcile_fx() use?": "unresolved_questions",
}


@pytest.mark.spec("R11.4", "R11.7")
@pytest.mark.parametrize(("cap", "kept"), [(400, 4), (800, 5)])
def test_decisions_and_open_questions_among_many_tool_outputs_are_kept_and_cited(
    cap: int, kept: int
) -> None:
    s, where = busy_with_choices()
    where["TODO: find out whether the nightly job calls fetch_rates() too"] = s.items[0].record_id
    req = s.request(cap)
    d = extract_draft(req)
    validate_draft(d, req.source_ids, 6 * cap)
    found = 0
    for text, section in SECTION.items():
        lines = [(n, f) for n, fs in d.sections() for f in fs if text in f.statement]
        if lines:
            (name, line), *more = lines
            assert not more and name == section and line.source_ids == (where[text],)
            found += 1
    assert found >= kept, d.text()  # 400 tokens: the shares hold four of the five
    assert len(d.verified_facts) >= 3  # and the tool output still gets the rest


@pytest.mark.spec("R11.4", "R11.7")
def test_a_decision_sentence_is_not_repeated_among_the_facts() -> None:
    s, _ = busy_with_choices()
    d = extract_draft(s.request(1600))
    for text in SECTION:
        assert sum(text in f.statement for f in d.all_facts()) == 1, text
        assert not any(text in f.statement for f in d.verified_facts), text


@pytest.mark.spec("R11.7")
def test_a_users_side_question_is_open_unless_the_answer_speaks_to_it() -> None:
    s = Seg()
    s.user("Why do exports fail? Also, do we still need the legacy_export flag?")
    s.answer("The exporter drops rows with an empty currency_code.")
    s.user("Why is the sync slow? And is sync_batch_size still read anywhere?")
    s.answer("sync_batch_size is read by the loader only; the sync waits on a lock.")
    d = extract_draft(s.request(800))
    name, _ = line_with(d, "do we still need the legacy_export flag?")
    assert name == "unresolved_questions"
    name, qa = line_with(d, "And is sync_batch_size still read anywhere?")
    assert name == "verified_facts" and qa.statement.startswith("Q: Why is the sync slow?")


@pytest.mark.parametrize(
    ("sentence", "section"),
    [
        ("Do the migration in two steps, not one big batch.", "decisions"),
        ("Use orjson instead of json for the export.", "decisions"),
        ("We will switch the importer to the bulk queue.", "decisions"),
        ("Decision: keep LEDGER_SYNC_TIMEOUT at 30 s.", "decisions"),
        ("Let's use pydantic for the config.", "decisions"),
        ("TODO: find out who owns the replay job.", "unresolved_questions"),
        ("It is still unclear whether the cache is shared.", "unresolved_questions"),
        ("Open question: is the nightly export idempotent.", "unresolved_questions"),
        ("Which worker reads the priority queue?", "unresolved_questions"),
        ("It works, not sure why yet.", "unresolved_questions"),
        ("I found 3 stale rows, not 4.", None),
        ("Let me check how this is wired.", None),
    ],
)
def test_choices_are_told_by_their_wording(sentence: str, section: str | None) -> None:
    assert sal.choice(sentence) == section


# --- roll-ups ------------------------------------------------------------------------------


def step_segment(n: int, extra: str = "") -> tuple[SourceItem, ...]:
    """Step ``n`` of a session: a question, noisy tool work, an answer; record ids and
    sequences unique across steps."""
    s = Seg()
    s.user(f"Why does job_{n} fail? {extra}".strip())
    for k in range(4):
        _, (call,) = s.step(f"Checking part {k}.", ("read_file", {"path": f"src/j{n}/p{k}.py"}))
        s.outcome(call, "grep", noisy_output(100 * n + k))
    s.answer(f"job_{n} fails with E{5000 + n} after {n}.25 s under load.")
    base = 1000 * n
    return tuple(
        SourceItem(f"rec_{base + i.session_sequence:032x}", base + i.session_sequence, i.kind,
                   i.role, i.text, i.tool_name, i.tool_status, i.call_id, i.arguments)
        for i in s.items
    )  # fmt: skip


def roll(parent: SummaryDraft | None, items: tuple[SourceItem, ...], cap: int) -> SummaryDraft:
    """One job: the new segment's draft merged with the parent, rolled up to ``cap``."""
    new = extract_draft(SummaryRequest(items, None, cap, "op"))
    merged = concat([parent, new] if parent else [new])
    entries = rollup_items(merged)
    rolled = extract_draft(SummaryRequest(entries, None, cap, "op:rollup"))
    validate_draft(rolled, frozenset(i.record_id for i in entries), 6 * cap)
    return rolled


@pytest.mark.spec("R11.4", "R11.7")
def test_ten_roll_ups_keep_the_first_decision_and_the_second_steps_open_question() -> None:
    decision = "Let's pin urllib3 to 1.26.18 instead of patching every caller"
    question = "TODO: find out whether the replay job retries job_2"
    draft: SummaryDraft | None = None
    for n in range(1, 11):
        extra = {1: f"{decision}.", 2: f"Also: {question}."}.get(n, "")
        draft = roll(draft, step_segment(n, extra), 600)
    assert draft is not None
    name, line = line_with(draft, decision)
    assert name == "decisions" and line.source_ids == (f"rec_{1001:032x}",)
    name, line = line_with(draft, question)
    assert name == "unresolved_questions" and line.source_ids == (f"rec_{2001:032x}",)
    assert len(draft.verified_facts) >= 1  # the facts still get the rest of the budget


@pytest.mark.spec("R11.7")
def test_a_short_budget_keeps_the_newest_decisions() -> None:
    s = Seg()
    for n in range(30):
        # the older decisions name more: by worth per character alone they would win
        more = f"PAY-{n + 100}" if n < 25 else "the job"
        s.answer(f"We decided to raise TIMEOUT_{n:02d} to {n + 10} s for {more}.")
    first = extract_draft(s.request(4000))
    assert len(first.decisions) == 30
    rolled = extract_draft(SummaryRequest(rollup_items(first), None, 300, "op:rollup"))
    kept = [f.statement for f in rolled.decisions]
    assert 0 < len(kept) < 30
    assert any("TIMEOUT_29" in t for t in kept)  # the newest, from the decisions share
