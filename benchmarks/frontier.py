"""``python -m benchmarks.frontier``: the execution frontier survives compaction (issues 24, 36).

One seeded synthetic coding-agent session (default 300 user turns) on a 16k-token profile,
compacted in process after every third turn through the compaction worker's own pure code,
as ``CompactionWorker._run`` calls it (``build_groups``, ``current_task_ids``,
``select_prefix``, ``segment``, ``source_items``, ``BoundedSummarizer.summarize`` with the
current plan and the segments sharing the bound, ``sources.merge_job``,
``BoundedSummarizer.roll_up``, ``apply_text_rules``, ``fit_draft`` under the plan heading,
``check_coverage``), two recent groups kept, the built-in extractive summarizer. No Kafka
or PostgreSQL.

Every question is a run of its own (the goal probed is the current run's question, the
task R4.4 pins); a later question may answer an earlier open question, in one of several
phrasings (one with no word saying it is settled). Twelve constraints, about five in
force at a time: the host sets half (``constraint_set``), the user states the others in a
question (declared with that input as their source); each is retired later
(``constraint_retired``). The model updates its plan (``plan_updated``; items pending →
in_progress → done, some blocked or dropped), restates it in prose sometimes ("Plan: step
… is in progress" — stale later), makes decisions ("We decided to use X instead of Y
because …", "Let's use …") and leaves open questions ("Open question: which …?", "TODO:
find out whether …"), most answered later.

Two variants of the same session (the same random draws):

- **phrasing only**: decisions and open questions are only said in the model's prose.
  Issue 36 removed the cue words' guaranteed share of the summary, and an assistant's
  question counts as open only until the next user message, so this variant is measured
  honestly and its decision and open-question targets are printed as information.
- **recorded**: the agent also records each decision (``decision_recorded``: the decision,
  ``{reason}`` when it gave one) and each open question (``question_opened``:
  ``{question_key}``, its own key) right after the message that states it, and closes a
  question (``question_closed``: ``{question_key, answer}``, the answer as content) right
  after the user's turn that answers it — what a runtime does through the SDK's
  ``record_decision`` / ``open_question`` / ``close_question`` or the model's tools
  (authority "model"). Here the issue-24 targets bind.

After every compaction three contexts are probed, all at the same token budget (tiktoken
cl100k): **ours** = the summary (with its plan heading) + the uncovered records (role:
content; a recorded decision or question as the thread view's state note,
``authored_note``) + the frontier blocks (``frontier_messages``); **masking** = every
message, tool outputs replaced by a placeholder, the oldest dropped until it fits;
**last-N** = whole messages, newest first. The baselines see the frontier records as
messages of the history (a constraint set or retired by the host; ``update_plan`` calls
rendered with ``plan_text``) and the recorded records as the same state notes, as a
runtime with no frontier would. Probes (on the whole text of each context, for every
method): the goal verbatim; every active constraint verbatim and no retired constraint's
text; the latest plan block states exactly the current plan's items and statuses; the
last five decisions' key phrases; the currently unanswered open questions' key phrases.
The plan probe reads only the last plan block of a context (a stale prose restatement does
not count against a method). The baselines' budget is ours's whole context at that point.
Also counted: answered questions that ours's summary still lists as open.

Prints, for both variants side by side, % of compactions each probe held (and item recall
for decisions and open questions, also after >= 10 roll-ups), the targets (goal,
constraints and plan 100% bind in both; decisions >= 90% and open questions >= 80% recall,
every compaction and after >= 10 roll-ups, on every seed, bind in the recorded variant)
with ok/FAIL, and writes ``build/bench/frontier.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.fidelity_sessions import ATTRS, COMPONENTS, EXCEPTIONS, NOUNS, PKGS, VERBS
from benchmarks.summary_fidelity import (
    KEEP_RECENT,
    MAX_CALLS,
    OUT,
    REPO,
    SEGMENT_TOKENS,
    MemoCounter,
    Summary,
    _messages,
    norm,
    trim_last,
)
from domain.compaction.authored import DECISION_RECORDED, QUESTION_CLOSED, QUESTION_OPENED
from domain.compaction.bound import MIN_BOUND, fit_draft, summary_bound
from domain.compaction.core.render import summary_heading
from domain.compaction.drafts import SourceItem, SummaryDraft, SummaryRequest
from domain.compaction.errors import InvalidSummary
from domain.compaction.sources import merge_job, merge_ranges, source_items
from domain.compaction.text_rules import apply_text_rules
from domain.compaction.validate import check_coverage
from domain.context.blocks import AUTHORED_KINDS, authored_note
from domain.context.frontier_blocks import frontier_messages
from domain.context.rendering import RecordView
from domain.context.selection import build_groups, current_task_ids, segment, select_prefix
from domain.context.tokens import CachedCounter
from domain.frontier import (
    CONSTRAINT_RETIRED,
    CONSTRAINT_SET,
    PLAN_UPDATED,
    Frontier,
    FrontierRecord,
    Item,
    Plan,
    active_constraints,
    declared_texts,
    plan_of,
    plan_text,
)
from domain.window.budget import ModelProfile
from services.compaction.extractive import ExtractiveSummarizer
from services.compaction.summarize import BoundedSummarizer

PROFILE = ModelProfile("m-16k", 16_384, 2_048, 512)
BOUND = summary_bound(0.15, PROFILE.input_budget())
EVERY = 3  # a compaction after every third user turn
METHODS = ("ours", "masking", "last-N")
# The same session twice: its decisions and open questions only phrased in the model's
# prose, or also recorded by their author (``decision_recorded``, ``question_opened``,
# ``question_closed``), as a runtime does through the SDK or the model's tools.
PHRASED, RECORDED = "phrasing only", "recorded"
VARIANTS = (PHRASED, RECORDED)
PROBES = ("goal", "constraints", "plan", "decisions", "open questions")
PLAN_HEAD = "[current plan — plan v"


@dataclass
class Synth:
    """The session: conversation records, frontier records and the ground truth."""

    goals: dict[str, str] = field(default_factory=dict)  # run -> its question (the goal)
    records: list[RecordView] = field(default_factory=list)
    frontier: list[FrontierRecord] = field(default_factory=list)
    decisions: list[tuple[int, str]] = field(default_factory=list)  # (sequence, phrase)
    questions: list[tuple[int, str, int]] = field(default_factory=list)  # asked, phrase, answered
    checkpoints: list[tuple[int, str]] = field(default_factory=list)  # (sequence, run) of a job
    seq: int = 0
    calls: int = 0


class _Gen:
    def __init__(self, seed: int, count: Callable[[str], int], recorded: bool = False) -> None:
        self.r = random.Random(seed)
        self.count = count
        self.recorded = recorded
        self.keys: dict[str, str] = {}  # an open question's phrase -> its question_key
        self.s = Synth()
        self.used: set[str] = set()
        self.comps = self.r.sample(COMPONENTS, 8)
        self.plan: list[Item] = []
        self.phase = 0
        self.pending_answers: dict[int, list[str]] = {}
        self.run = "run_0000"

    def fresh(self, make: Callable[[], str]) -> str:
        while True:
            v = make()
            if v not in self.used:
                self.used.add(v)
                return v

    def rec(self, kind: str, authority: str, text: str, payload: dict[str, Any]) -> str:
        self.s.seq += 1
        rid = f"rec_{self.s.seq:06d}"
        self.s.records.append(
            RecordView(
                rid, self.s.seq, self.run, "main", kind, authority, text, payload, self.count(text)
            )
        )
        return rid

    # What a runtime records through the SDK (``record_decision``, ``open_question``,
    # ``close_question``; the model's tools publish the same, with authority "model"):
    # the payloads as the store holds them (``DecisionPayload``, ``QuestionPayload``).
    def record_decision(self, text: str, reason: str | None) -> None:
        self.rec(DECISION_RECORDED, "model", text, {"reason": reason} if reason else {})

    def open_question(self, phrase: str, text: str) -> None:
        key = f"question:{self.run}:{len(self.keys) + 1}"  # the opening's own event key
        self.keys[phrase] = key
        self.rec(QUESTION_OPENED, "model", text, {"question_key": key})

    def close_question(self, phrase: str, answer: str) -> None:
        key = self.keys[phrase]
        self.rec(QUESTION_CLOSED, "model", answer, {"question_key": key, "answer": answer})

    def frontier(self, kind: str, text: str, payload: dict[str, Any]) -> None:
        self.s.seq += 1
        fr = FrontierRecord(f"fr_{self.s.seq:06d}", self.s.seq, kind, self.run, text, payload)
        self.s.frontier.append(fr)

    def step(self, text: str, name: str, args: dict[str, Any], output: str) -> None:
        self.s.calls += 1
        call = {"call_id": f"call_{self.s.calls}", "name": name, "arguments_json": json.dumps(args)}
        self.rec("assistant_message", "model", text, {"tool_calls": [call]})
        self.rec("tool_outcome", "tool", output, {**call, "status": "ok"})

    def phrase(self) -> str:
        r = self.r
        return f"the {r.choice(self.comps)} {r.choice(NOUNS)}"


def _noise(r: random.Random, n: int) -> str:
    return "\n".join(
        f"    {r.choice(NOUNS)} = {r.choice(VERBS)}_{r.choice(NOUNS)}({r.randint(0, 999)})"
        for _ in range(n)
    )


def _advance_plan(g: _Gen) -> None:
    """The model's next plan: one item moves on; a fresh phase once all are settled."""
    r = g.r
    if not g.plan or all(i.status in ("done", "dropped") for i in g.plan):
        g.phase += 1
        g.plan = [
            Item(f"p{g.phase}s{k}", g.fresh(lambda: f"{r.choice(VERBS)} {g.phrase()}"), "pending")
            for k in range(1, r.randint(4, 6) + 1)
        ]
    else:
        live = [n for n, i in enumerate(g.plan) if i.status not in ("done", "dropped")]
        n = live[0]
        item = g.plan[n]
        roll = r.random()
        if item.status == "blocked" or (item.status == "in_progress" and roll < 0.8):
            status = "done"
        elif item.status == "pending" and roll < 0.12:
            status = r.choice(("blocked", "dropped"))
        else:
            status = "in_progress"
        g.plan[n] = Item(item.item_id, item.text, status)
    items = [dataclasses.asdict(i) for i in g.plan]
    g.frontier(PLAN_UPDATED, "", {"items": items, "explanation": None})


def _constraints(g: _Gen, q: int, total: int) -> str | None:
    """Twelve constraints over the session, about five in force at a time: the host sets
    the even ones; the user states the odd ones in a question (returned, to be asked and
    then declared with that input as their source)."""
    spacing = max(1, total // 12)
    if q % spacing or q // spacing >= 12:
        return None
    k = q // spacing
    if k >= 5:
        g.frontier(CONSTRAINT_RETIRED, "", {"constraint_id": f"c{k - 5}"})
    text = g.fresh(lambda: f"Rule C{k}: never change {g.phrase()} without a migration note.")
    if k % 2:
        return text
    g.frontier(CONSTRAINT_SET, text, {"constraint_id": f"c{k}", "scope": "session"})
    return None


def _final(g: _Gen, q: int, total: int) -> tuple[str, list[tuple[str, str, str | None]]]:
    """The model's last message of a turn, and what it records with it in the recorded
    variant: (kind, key phrase, the record's text and reason or none). The random draws
    are the same in both variants: the sessions differ only by those records."""
    r = g.r
    parts = [f"Done with turn {q}."]
    authored: list[tuple[str, str, str | None]] = []
    if r.random() < 0.4:
        a, b = r.sample(PKGS, 2)
        key = g.fresh(lambda: f"use {a} instead of {b} for {g.phrase()}")
        parts.append(f"We decided to {key} because it is faster.")
        g.s.decisions.append((g.s.seq + 1, key))
        authored.append((DECISION_RECORDED, key, "it is faster"))
    elif r.random() < 0.25:
        key = g.fresh(lambda: f"use {r.choice(PKGS)} for {g.phrase()}")
        parts.append(f"Let's {key}.")
        g.s.decisions.append((g.s.seq + 1, key))
        authored.append((DECISION_RECORDED, key, None))
    if r.random() < 0.3:
        if r.random() < 0.5:
            key = g.fresh(lambda: f"which {r.choice(ATTRS)} does {g.phrase()} use")
            asked = f"{key} in production?"
            parts.append(f"Open question: {asked}")
        else:
            key = g.fresh(
                lambda: f"find out whether {g.phrase()} retries on {r.choice(EXCEPTIONS)}"
            )
            asked = f"{key}."
            parts.append(f"TODO: {asked}")
        answered = q + r.randint(3, 20) if r.random() < 0.75 else total + 1
        g.s.questions.append((g.s.seq + 1, key, 0))
        g.pending_answers.setdefault(answered, []).append(key)
        authored.append((QUESTION_OPENED, key, asked[0].upper() + asked[1:]))
    if g.plan and r.random() < 0.3:
        item = r.choice(g.plan)
        parts.append(f"Plan: step {item.text} is {item.status.replace('_', ' ')}.")
    return " ".join(parts), authored


def _record(g: _Gen, authored: list[tuple[str, str, str | None]]) -> None:
    """The recorded variant: the turn's decisions and questions, recorded after the
    message that states them."""
    for kind, key, extra in authored:
        if kind == DECISION_RECORDED:
            g.record_decision(key[0].upper() + key[1:] + ".", extra)
        else:
            g.open_question(key, extra or key)


# How a later question takes an earlier open question up: varied, and one of them with no
# word that says it is settled (a summarizer cannot tell that one was answered). Beside
# each, the answer the recorded variant's closing carries.
_ANSWERS = (
    "About the earlier point ({key}): answered, it is fine.",
    "Re {key}: resolved, nothing to change.",
    "On {key} - confirmed with the owners, it stays as is.",
    "It turns out {key} was a non-issue.",
    "Regarding {key}, the answer is yes.",
    "We checked {key}: 30 s, as configured.",
)
_GISTS = ("fine", "nothing to change", "it stays as is", "a non-issue", "yes", "30 s")


def make_session(
    seed: int, questions: int, count: Callable[[str], int], recorded: bool = False
) -> Synth:
    """The seeded session; ``recorded``: its decisions and open questions are also
    recorded by their author, and a question is closed when the user answers it."""
    g = _Gen(seed, count, recorded)
    r = g.r
    answered: dict[str, int] = {}
    for q in range(questions):
        g.run = f"run_{q:04d}"  # every question is a run of its own (R1)
        rule = _constraints(g, q, questions)
        ask = f"Question {q}: migrate {g.phrase()} to {r.choice(PKGS)} and keep its API stable."
        if rule is not None:
            ask += f" {rule}"
        closings: list[tuple[str, str]] = []
        for key in g.pending_answers.pop(q, []):
            subject = key.removeprefix("find out ")  # "whether …" / "which … use"
            template = r.choice(_ANSWERS)
            ask += " " + template.format(key=subject)
            answered[key] = g.s.seq + 1
            closings.append((key, _GISTS[_ANSWERS.index(template)]))
        g.s.goals[g.run] = ask
        source = g.rec("user_input", "user", ask, {"intent": "question"})
        if rule is not None:  # the user's rule: declared with the input it came from
            cid = f"c{q // max(1, questions // 12)}"
            g.frontier(CONSTRAINT_SET, rule, {"constraint_id": cid, "source_record_id": source})
        if g.recorded:  # the agent closes what the user's turn answered
            for key, gist in closings:
                g.close_question(key, gist)
        path = f"src/{r.choice(g.comps)}/{r.choice(NOUNS)}.py"
        g.step("Reading the module.", "read_file", {"path": path}, _noise(r, r.randint(8, 20)))
        g.step("Running the tests.", "run_tests", {"path": path}, _noise(r, r.randint(4, 10)))
        if q % 4 == 0:
            _advance_plan(g)
        text, authored = _final(g, q, questions)
        g.rec("assistant_message", "model", text, {"tool_calls": []})
        if g.recorded:
            _record(g, authored)
        if (q + 1) % EVERY == 0:
            g.s.checkpoints.append((g.s.seq, g.run))
    g.s.questions = [(a, k, answered.get(k, 0)) for a, k, _ in g.s.questions]
    return g.s


# --- the compaction job, as the worker runs it (``CompactionWorker._run``) -------------


@dataclass
class Jobs:
    counter: MemoCounter
    summarizer: BoundedSummarizer = field(init=False)
    failed: int = 0

    def __post_init__(self) -> None:
        self.summarizer = BoundedSummarizer(
            ExtractiveSummarizer(), CachedCounter(self.counter), SEGMENT_TOKENS, 600.0
        )

    async def job(
        self, records: Sequence[RecordView], parent: Summary | None, front: Frontier, run: str
    ) -> Summary | None:
        count = self.counter.count
        plan, declared = front.plan, front.declared
        before = parent.covered if parent else set()
        view = [r for r in records if r.record_id not in before]
        pinned = current_task_ids(view, run)
        selection = select_prefix(build_groups(view), keep_recent=KEEP_RECENT, pinned=pinned)
        if not selection.covered:
            return None
        segments = segment(selection.covered, SEGMENT_TOKENS)[:MAX_CALLS]
        by_id = {r.record_id: r for r in view}
        previous = parent.draft.text()[: BOUND * 4] if parent else None
        # the built-in summarizer's segments share the bound by their size (no per-call cap)
        total = sum(seg.tokens for seg in segments) or 1
        drafts: list[SummaryDraft] = []
        shown: list[SourceItem] = []
        for i, seg in enumerate(segments):
            items = source_items(seg, by_id)
            shown.extend(items)
            share = min(BOUND, max(MIN_BOUND, BOUND * seg.tokens // total))
            req = SummaryRequest(items, previous, share, f"f:{i}", plan=plan, constraints=declared)
            drafts.append(await self.summarizer.summarize(req))
        # the worker's merge: the parent carried forward, a question a later user message
        # follows closed, the recorded decisions and questions as entries of their own
        records = [by_id[i] for s in segments for g in s.groups for i in g.record_ids]
        merged = merge_job(parent.draft.to_dict() if parent else None, drafts, shown, records)
        rolled = 0
        if count(merged.text()) > BOUND:
            merged, _, info = await self.summarizer.roll_up(merged, BOUND, "f", None, plan)
            rolled = 1 if info.error is None else 0
        merged, _ = apply_text_rules(merged, plan, declared)
        heading = summary_heading(plan)
        merged, _ = fit_draft(merged, BOUND - (count(f"{heading}\n") if heading else 0), count)
        covered = [g for s in segments for g in s.groups]
        new = {i for g in covered for i in g.record_ids}
        ranges = merge_ranges(covered, parent.ranges if parent else ())
        check_coverage(
            merged, {i: by_id[i].session_sequence for i in new}, ranges, earlier=frozenset(before)
        )
        rollups = (parent.rollups if parent else 0) + rolled
        return Summary(merged, before | new, ranges, rollups, count(_text(merged.text(), plan)))


def _text(draft_text: str, plan: Plan) -> str:
    """A summary's text as the worker saves it: dated to the plan it was written at."""
    heading = summary_heading(plan)
    return f"{heading}\n{draft_text}" if heading else draft_text


def _rendered(records: Sequence[RecordView], masked: bool) -> list[str]:
    """The records as messages (``summary_fidelity._messages``); a recorded decision or
    question as the short state note the thread view shows (``authored_note``)."""
    out: list[str] = []
    for r in records:
        if r.kind in AUTHORED_KINDS:
            out.append(f"state: {authored_note(r.kind, r.text, r.payload)}")
        else:
            out.extend(_messages([r], masked))
    return out


# --- contexts and probes ---------------------------------------------------------------


def frontier_at(s: Synth, upto: int, run: str) -> Frontier:
    recs = [f for f in s.frontier if f.session_sequence <= upto]
    plans = [f for f in recs if f.kind == PLAN_UPDATED]
    constraints, version = active_constraints(recs, run)
    plan = plan_of(plans[-1] if plans else None, len(plans))
    return Frontier(plan, constraints, version, 1, declared_texts(recs))


def _history(s: Synth, upto: int, masked: bool) -> list[str]:
    """Every message up to ``upto`` as a runtime without a frontier holds them."""
    convo = {r.session_sequence: r for r in s.records if r.session_sequence <= upto}
    front = {f.session_sequence: f for f in s.frontier if f.session_sequence <= upto}
    out: list[str] = []
    n_plans = 0
    for seq in sorted([*convo, *front]):
        if seq in convo:
            out.extend(_rendered([convo[seq]], masked))
            continue
        f = front[seq]
        if f.kind == CONSTRAINT_SET:
            out.append(f"host: constraint set: {f.text}")
        elif f.kind == CONSTRAINT_RETIRED:
            out.append(f"host: constraint retired: {f.payload['constraint_id']}")
        else:
            n_plans += 1
            out.append(f"assistant: update_plan\n{plan_text(plan_of(f, n_plans))}")
    return out


def contexts(
    s: Synth, upto: int, run: str, summary: Summary, count: Callable[[str], int]
) -> dict[str, str]:
    uncovered = [
        r for r in s.records if r.session_sequence <= upto and r.record_id not in summary.covered
    ]
    front = frontier_at(s, upto, run)
    blocks = frontier_messages(front, count, 4)
    text = _text(summary.draft.text(), front.plan)
    ours = "\n".join([text, *_rendered(uncovered, False), *(str(m["content"]) for m in blocks)])
    budget = count(ours)
    return {
        "ours": ours,
        "masking": trim_last(_history(s, upto, True), budget, count),
        "last-N": trim_last(_history(s, upto, False), budget, count),
    }


def _plan_held(text: str, plan: Plan) -> bool:
    at = text.rfind(PLAN_HEAD)
    if at < 0:
        return not plan.items
    lines = text[at:].splitlines()[1:]
    stated = []
    for line in lines:
        head, dot, rest = line.partition(". [")
        if not (dot and head.isdigit()):
            break
        stated.append("[" + rest.rsplit(" (id ", 1)[0])
    return stated == [f"[{i.status}] {i.text}" for i in plan.items]


def probe(s: Synth, upto: int, run: str, text: str) -> dict[str, tuple[int, int]]:
    """Each probe as (held, of): the whole text of one context at sequence ``upto``."""
    flat = norm(text)
    fr = frontier_at(s, upto, run)
    active = {c.text for c in fr.constraints}
    retired = {
        f.text for f in s.frontier if f.kind == CONSTRAINT_SET and f.session_sequence <= upto
    }
    retired -= active
    cons = all(norm(c) in flat for c in active) and not any(norm(c) in flat for c in retired)
    decisions = [k for seq, k in s.decisions if seq <= upto][-5:]
    opened = [k for a, k, ans in s.questions if a <= upto and not (ans and ans <= upto)]
    return {
        "goal": (int(norm(s.goals[run]) in flat), 1),
        "constraints": (int(cons), 1),
        "plan": (int(_plan_held(text, fr.plan)), 1),
        "decisions": (sum(norm(k) in flat for k in decisions), len(decisions)),
        "open questions": (sum(norm(k) in flat for k in opened), len(opened)),
    }


# --- the run ---------------------------------------------------------------------------


def _tally() -> dict[str, dict[str, list[int]]]:
    return {m: {p: [0, 0, 0, 0] for p in PROBES} for m in METHODS}  # held, n, items, of


def _add(t: dict[str, list[int]], probes: dict[str, tuple[int, int]]) -> None:
    for name, (held, of) in probes.items():
        row = t[name]
        row[0] += int(held == of)
        row[1] += 1
        row[2] += held
        row[3] += of


def _share(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


async def run(seed: int, questions: int, recorded: bool = False) -> dict[str, Any]:
    """The session compacted after every third turn, every method probed after each job;
    ``recorded``: the variant whose decisions and open questions are also recorded."""
    counter = MemoCounter()
    s = make_session(seed, questions, counter.count, recorded)
    jobs = Jobs(counter)
    parent: Summary | None = None
    every, late = _tally(), _tally()
    compactions = 0
    stale = [0, 0]  # answered questions the summary still lists as open, of those answered
    for upto, run_id in s.checkpoints:
        view = [r for r in s.records if r.session_sequence <= upto]
        try:
            job = await jobs.job(view, parent, frontier_at(s, upto, run_id), run_id)
        except InvalidSummary as exc:  # the worker fails the job: records stay verbatim
            jobs.failed += 1
            print(f"  job at {upto} failed: {exc}")
            continue
        if job is None:
            continue
        parent = job
        compactions += 1
        listed = norm("\n".join(f.statement for f in job.draft.unresolved_questions))
        answered = [k for _, k, ans in s.questions if ans and ans <= upto]
        stale[0] += sum(norm(k) in listed for k in answered)
        stale[1] += len(answered)
        for method, text in contexts(s, upto, run_id, parent, counter.count).items():
            probes = probe(s, upto, run_id, text)
            _add(every[method], probes)
            if parent.rollups >= 10:
                _add(late[method], probes)
    rows: dict[str, dict[str, float | None]] = {}
    for label, t in (("", every), (LATE, late)):
        for p in PROBES:
            rows[f"{p}{label}"] = {m: _share(t[m][p][0], t[m][p][1]) for m in METHODS}
            if p in ("decisions", "open questions"):
                rows[f"{p} recall{label}"] = {m: _share(t[m][p][2], t[m][p][3]) for m in METHODS}
    kinds = [r.kind for r in s.records]
    return {
        "variant": RECORDED if recorded else PHRASED,
        "seed": seed,
        "questions": questions,
        "records": len(s.records),
        "frontier_records": len(s.frontier),
        "authored_records": {k: kinds.count(k) for k in sorted(AUTHORED_KINDS)},
        "session_tokens": sum(r.token_count for r in s.records),
        "summary_bound": BOUND,
        "compactions": compactions,
        "failed_jobs": jobs.failed,
        "rollups": parent.rollups if parent else 0,
        "compactions_after_10_rollups": late["ours"]["goal"][1],
        "decisions": len(s.decisions),
        "questions_asked": len(s.questions),
        "questions_answered": sum(1 for *_, a in s.questions if a),
        "answered_still_open": _share(*stale),
        "rows": rows,
    }


LATE = " after >=10 roll-ups"
# The issue-24 targets; which of them bind in each variant (``BINDING``).
TARGETS = {
    "goal 100% after every compaction (ours)": ("goal", 1.0),
    "constraints 100% after every compaction (ours)": ("constraints", 1.0),
    "plan 100% after every compaction (ours)": ("plan", 1.0),
    "decisions >= 90% (recall, every compaction)": ("decisions recall", 0.9),
    "decisions >= 90% (recall, after >=10 roll-ups)": (f"decisions recall{LATE}", 0.9),
    "open questions >= 80% (recall, every compaction)": ("open questions recall", 0.8),
    "open questions >= 80% (recall, after >=10 roll-ups)": (f"open questions recall{LATE}", 0.8),
}
# Goal, constraints and plan are state of record in both. Issue 36 took the cue words'
# guaranteed share away: what is only phrased is measured as information; what the
# author recorded must be kept.
BINDING = {PHRASED: tuple(TARGETS)[:3], RECORDED: tuple(TARGETS)}


def targets(result: dict[str, Any]) -> dict[str, bool]:
    rows = result["rows"]
    return {name: (rows[row]["ours"] or 0.0) >= at for name, (row, at) in TARGETS.items()}


def binding_held(result: dict[str, Any]) -> bool:
    """Every target that binds in the result's variant held (on every seed, once ``main``
    has folded the other seeds' targets in)."""
    return all(result["targets"][name] for name in BINDING[result["variant"]])


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def print_results(results: dict[str, dict[str, Any]]) -> None:
    """Both variants side by side: the probes, the targets, the seeds."""
    for variant, r in results.items():
        authored = ", ".join(f"{n} {k}" for k, n in r["authored_records"].items() if n)
        print(
            f"frontier [{variant}]: seed {r['seed']}, {r['questions']} user turns,"
            f" {r['records']} records ({r['session_tokens']} tokens"
            f"{'; ' + authored if authored else ''}) + {r['frontier_records']} frontier"
            f" records; {r['compactions']} compactions ({r['failed_jobs']} failed),"
            f" {r['rollups']} roll-ups, summary bound {r['summary_bound']} tokens"
            f" ({PROFILE.name}); {r['compactions_after_10_rollups']} compactions after >= 10"
            f" roll-ups; answered questions its summary still lists as open:"
            f" {_pct(r['answered_still_open'])}"
        )
    print("\n  % of compactions the probe held (recall rows: share of items present)")
    head = "".join(f"{v[:30]:>30}" for v in results)
    print(f"  {'':<44}{head}")
    print(f"  {'probe':<44}" + "".join(m.rjust(10) for _ in results for m in METHODS))
    first = next(iter(results.values()))
    for name in first["rows"]:
        cells = "".join(
            _pct(v).rjust(10) for r in results.values() for v in r["rows"][name].values()
        )
        print(f"  {name:<44}{cells}")
    print("\ntargets (issue 24; every seed; info: not binding in that variant, issue 36)")
    print(f"  {'target':<54}" + "".join(f"{v:>16}" for v in results))
    for name in TARGETS:
        cells = ""
        for variant, r in results.items():
            ok = r["targets"][name]
            mark = (
                ("ok" if ok else "FAIL")
                if name in BINDING[variant]
                else f"info: {'met' if ok else 'missed'}"
            )
            cells += f"{mark:>16}"
        print(f"  {name:<54}{cells}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seed", type=int, default=24, help="the session whose table prints")
    parser.add_argument(
        "--also", default="4,5,7,8,9", help="more seeds: every target must hold on each"
    )
    parser.add_argument("--questions", type=int, default=300)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    others = [int(x) for x in args.also.split(",") if x.strip()]
    results: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        result = asyncio.run(run(args.seed, args.questions, variant == RECORDED))
        result["targets"] = targets(result)
        result["seeds"] = {args.seed: _headline(result)}
        for seed in others:
            more = asyncio.run(run(seed, args.questions, variant == RECORDED))
            result["seeds"][seed] = _headline(more)
            for name, ok in targets(more).items():
                result["targets"][name] = result["targets"][name] and ok
        result["worst_seed"] = {
            h: min((row[h] for row in result["seeds"].values() if row[h] is not None), default=None)
            for h in _HEADLINE
        }
        result["binding_held"] = binding_held(result)
        results[variant] = result
    elapsed = round(time.perf_counter() - started, 1)
    print_results(results)
    _print_seeds(results)
    out = {
        "seed": args.seed,
        "seeds": [args.seed, *others],
        "questions": args.questions,
        "variants": results,
        "binding": {v: list(names) for v, names in BINDING.items()},
        "ok": all(r["binding_held"] for r in results.values()),
        "elapsed_s": elapsed,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "frontier.json"
    path.write_text(json.dumps(out, indent=2))
    verdict = "every binding target held" if out["ok"] else "a binding target FAILED"
    print(f"\n{verdict}; wrote {path.relative_to(REPO)} in {elapsed} s")
    return 0


_HEADLINE = (
    "decisions recall",
    f"decisions recall{LATE}",
    "open questions recall",
    f"open questions recall{LATE}",
)


def _headline(result: dict[str, Any]) -> dict[str, float | None]:
    return {name: result["rows"][name]["ours"] for name in _HEADLINE}


def _print_seeds(results: dict[str, dict[str, Any]]) -> None:
    print("\nours on every seed (recall; late: after >= 10 roll-ups)")
    short = ("decisions", "decisions late", "open questions", "open q. late")
    print(f"  {'seed':<6}{'variant':<16}" + "".join(f"{h:>16}" for h in short))
    for variant, r in results.items():
        for seed, row in r["seeds"].items():
            cells = "".join(f"{_pct(v):>16}" for v in row.values())
            print(f"  {seed:<6}{variant:<16}{cells}")


if __name__ == "__main__":
    sys.exit(main())
