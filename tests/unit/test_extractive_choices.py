"""Decisions and open questions by structure (issue 36): the author's recorded entries are
kept first, one-shot, through roll-ups and by the fit; an assistant's question is open
only at the end of its segment; cue words only order. Pure."""

from __future__ import annotations

import pytest

from domain.compaction.bound import concat, fit_draft, rollup_items
from domain.compaction.drafts import RECORDED, Fact, SourceItem, SummaryDraft, SummaryRequest
from domain.compaction.extractive import extract_draft
from domain.compaction.extractive import salience as sal
from domain.compaction.validate import validate_draft
from tests.unit.test_extractive import COUNT, Seg, line_with


def noisy_output(k: int) -> str:
    """A tool result full of salient-looking things: paths, numbers, an error."""
    rows = [
        f"src/mod{k}/part{i}.py:{i}: total = {i * 7}.5 ms in handler_{k}_{i}" for i in range(40)
    ]
    return "\n".join([*rows, f"ERROR worker_{k}: E{4000 + k} lock wait exceeded after {k}.5 s"])


def recorded_segment(n: int = 12) -> tuple[Seg, str, str]:
    """Busy tool work with one recorded decision and one recorded open question."""
    s = Seg()
    s.user("Why is the FX sync slow?")
    decision = question = ""
    for k in range(n):
        _, (call,) = s.step(f"Reading part {k}.", ("read_file", {"path": f"src/l/s{k}.py"}))
        s.outcome(call, "grep", noisy_output(k))
        if k == 3:
            decision = s._add(
                "decision_recorded", "assistant", "Batch ledger writes by 500.", detail="locks"
            )
        if k == 7:
            question = s._add(
                "question_opened", "assistant", "Does merge run before backfill?", question_key="q7"
            )
    s.answer("Fetching is slow because of the pool.")
    return s, decision, question


@pytest.mark.spec("R11.4", "R11.7")
@pytest.mark.parametrize("cap", [150, 400, 1600])
def test_recorded_entries_are_kept_verbatim_whatever_the_budget(cap: int) -> None:
    s, decision, question = recorded_segment()
    req = s.request(cap)
    d = extract_draft(req)
    validate_draft(d, req.source_ids, 6 * cap)
    assert [(f.statement, f.source_ids, f.origin) for f in d.decisions] == [
        ("Batch ledger writes by 500. (reason: locks)", (decision,), RECORDED)
    ]
    (q,) = d.unresolved_questions
    assert (q.statement, q.source_ids, q.origin, q.key) == (
        "Does merge run before backfill?", (question,), RECORDED, "q7",
    )  # fmt: skip


@pytest.mark.spec("R11.7")
def test_an_assistant_question_before_a_user_message_is_not_open() -> None:
    s = Seg()
    s.user("Rename the flag.")
    asked = s.answer("Done. Should I also open a PR?")
    s.user("Yes, go ahead")
    s.answer("Opened #12.")
    d = extract_draft(s.request())
    assert not d.unresolved_questions
    _, line = line_with(d, "Should I also open a PR?")
    assert line.source_ids == (asked,)  # kept, as history


@pytest.mark.spec("R11.7")
def test_wording_never_opens_a_question_nor_makes_a_decision() -> None:
    s = Seg()
    s.user("TODO: find out who owns the replay job. Decision: use orjson.")
    s.answer("It is still unclear whether the cache is shared. We decided to pin urllib3.")
    s.user("Ok.")
    d = extract_draft(s.request())
    assert not d.decisions and not d.unresolved_questions
    assert "TODO: find out who owns the replay job" in d.text()
    assert "We decided to pin urllib3" in d.text()
    assert sal.is_decision("We decided to pin urllib3.")  # the cue remains, to order


# --- roll-ups and the fit --------------------------------------------------------------


def step_segment(n: int) -> tuple[SourceItem, ...]:
    """Step ``n`` of a session: a request, noisy tool work, an answer; record ids and
    sequences unique across steps."""
    s = Seg()
    s.user(f"Why does job_{n} fail?")
    for k in range(4):
        _, (call,) = s.step(f"Checking part {k}.", ("read_file", {"path": f"src/j{n}/p{k}.py"}))
        s.outcome(call, "grep", noisy_output(100 * n + k))
    if n == 1:
        s._add("decision_recorded", "assistant", "Pin urllib3 to 1.26.18.")
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


@pytest.mark.spec("R11.4", "R11.7", "R11.8")
def test_ten_roll_ups_keep_the_recorded_decision_and_the_newest_requests() -> None:
    draft: SummaryDraft | None = None
    for n in range(1, 11):
        draft = roll(draft, step_segment(n), 600)
    assert draft is not None
    (decision,) = draft.decisions
    assert decision.statement == "Pin urllib3 to 1.26.18." and decision.origin == RECORDED
    asked = [f.statement for f in draft.verified_facts if f.statement.startswith("user: ")]
    assert "user: Why does job_10 fail?" in asked and len(asked) >= 5
    assert draft.failures  # the errors the tools met
    assert COUNT(draft.text()) <= 600 * 1.1


@pytest.mark.spec("R11.2", "R11.8")
def test_the_fit_drops_recorded_entries_last_and_user_requests_after_other_facts() -> None:
    facts = tuple(Fact(f"src/m{i}.py: read {i * 7} rows in {i} ms", (f"r{i}",)) for i in range(30))
    asks = tuple(Fact(f"user: please fix job {i}", (f"u{i}",)) for i in range(5))
    recorded = (Fact("Use orjson over json for the export.", ("d0",), RECORDED),)
    questions = (Fact("Which queue does reconcile use?", ("q0",)),)
    draft = SummaryDraft(facts + asks, recorded, (), questions, (), ())
    fitted, dropped = fit_draft(draft, 60, COUNT)
    assert COUNT(fitted.text()) <= 60 and dropped
    assert fitted.decisions == recorded
    kept = [f.statement for f in fitted.verified_facts]
    assert kept and all(k.startswith("user: ") for k in kept)
    assert kept == [f.statement for f in asks][len(asks) - len(kept) :]  # the newest
