"""A bounded summary (R11.2, R11.8, R9.7). Pure.

Each committed summary carries its parent's content forward, so without a bound a long
session's summary grows until it alone fills the budget and the session can never be
compacted again (``history_over_budget`` for good). Policy ``summary_max_ratio`` bounds
the effective summary; past it the job *rolls up*: the parent summary's entries and the
new segments' drafts are summarized again, as one bounded summary (hierarchical
re-summarization). Provenance survives the roll-up: each entry still cites real record
ids, the summary's covered ranges name every record it replaces (through the parents),
the parent chain stays in ``summary_revisions`` and every original stays readable by id.

The roll-up input is itself bounded per request (``chunk``), and a final deterministic
fit (``fit_draft``) guarantees the bound whatever a model answers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from domain.compaction.drafts import FACT_FIELDS, Fact, SourceItem, SummaryDraft

CountFn = Callable[[str], int]
ROLLUP_KIND = "summary:"  # + a SummaryDraft section: an entry of an earlier summary
RECORDED_ROLE = "recorded"  # a roll-up item's role when its entry is the author's record
# A line the built-in summarizer quotes from a user message starts so: the user's own
# request, which the fit keeps before the other facts.
USER_PREFIX = "user: "
ANSWER_PREFIX = "assistant: "  # … and one from an answer (an assistant message without calls)
MIN_BOUND = 32
ARTIFACTS_KEPT = 20  # artifact refs a rolled-up summary keeps (the most recent)


def summary_bound(ratio: float, input_budget: int) -> int:
    """Tokens the effective summary may take: ``ratio * InputBudget``, floored."""
    return max(MIN_BOUND, math.floor(ratio * input_budget))


def rollup_items(draft: SummaryDraft, first_sequence: int = 0) -> tuple[SourceItem, ...]:
    """The entries of ``draft`` as summarizer input. Each keeps the first record id it
    cites (a real record: what a rolled-up entry cites stays real); the section travels
    in the kind, so a summarizer can keep failures and open questions first, and an
    entry the author recorded (``origin``) has the role ``recorded``."""
    out: list[SourceItem] = []
    for name in FACT_FIELDS:
        for fact in getattr(draft, name):
            if not fact.source_ids:
                continue
            out.append(
                SourceItem(
                    fact.source_ids[0],
                    first_sequence + len(out),
                    f"{ROLLUP_KIND}{name}",
                    RECORDED_ROLE if fact.recorded else "note",
                    fact.statement,
                    question_key=fact.key,
                )
            )
    return tuple(out)


def chunk(
    items: Sequence[SourceItem], per_request_tokens: int, count: CountFn
) -> list[tuple[SourceItem, ...]]:
    """Split ``items``, in order, into requests of at most ``per_request_tokens`` (one
    oversized item alone): the roll-up's input is bounded per request too (R11.2)."""
    out: list[tuple[SourceItem, ...]] = []
    cur: list[SourceItem] = []
    size = 0
    for item in items:
        t = count(item.text) + 8  # the id and kind shown with it
        if cur and size + t > per_request_tokens:
            out.append(tuple(cur))
            cur, size = [], 0
        cur.append(item)
        size += t
    if cur:
        out.append(tuple(cur))
    return out


def concat(drafts: Sequence[SummaryDraft], notes: Sequence[str] = ()) -> SummaryDraft:
    """One draft of several, in order; artifact refs deduplicated."""

    def cat(name: str) -> tuple[Fact, ...]:
        return tuple(f for d in drafts for f in getattr(d, name))

    return SummaryDraft(
        verified_facts=cat("verified_facts"),
        decisions=cat("decisions"),
        failures=cat("failures"),
        unresolved_questions=cat("unresolved_questions"),
        work_artifact_refs=tuple(dict.fromkeys(r for d in drafts for r in d.work_artifact_refs)),
        observations=tuple(o for d in drafts for o in d.observations) + tuple(notes),
    )


def fit_draft(draft: SummaryDraft, bound: int, count: CountFn) -> tuple[SummaryDraft, int]:
    """``draft`` reduced until its text counts at most ``bound`` tokens, and how many
    entries were dropped. Drop order: notes, artifact refs (``_refs_by_trace``), plain
    facts, decisions, failures, open questions, then the user's requests (``USER_PREFIX``)
    and the author's recorded entries last of all; oldest first within each. Deterministic;
    keeps at least one fact (an empty summary is not a summary)."""
    if count(draft.text()) <= bound:
        return draft, 0
    facts = {name: list(getattr(draft, name)) for name in FACT_FIELDS}
    notes = list(draft.observations)

    def build() -> SummaryDraft:
        return SummaryDraft(
            verified_facts=tuple(facts["verified_facts"]),
            decisions=tuple(facts["decisions"]),
            failures=tuple(facts["failures"]),
            unresolved_questions=tuple(facts["unresolved_questions"]),
            work_artifact_refs=tuple(r for r in draft.work_artifact_refs if r in named + alone),
            observations=tuple(notes),
        )

    def cost(entry: Fact | str) -> int:
        return count(entry.line() if isinstance(entry, Fact) else f"- {entry}") + 1

    # One queue per class, oldest first; an entry dropped from its queue leaves its
    # section too, so each section keeps its order.
    def plain(f: Fact) -> bool:
        return not f.recorded and not f.statement.startswith(USER_PREFIX)

    named, alone = _refs_by_trace(list(draft.work_artifact_refs), facts)
    queues: list[list[Fact] | list[str]] = [notes, named, alone]
    for name in FACT_FIELDS:
        queues.append([f for f in facts[name] if plain(f)])
    entries = [f for name in FACT_FIELDS for f in facts[name]]
    queues.append([f for f in entries if f.statement.startswith(USER_PREFIX) and not f.recorded])
    queues.append([f for f in entries if f.recorded])
    dropped = 0
    for queue in queues:
        is_fact = queue is not notes and queue is not named and queue is not alone
        while queue:
            over = count(build().text()) - bound
            if over <= 0:
                return build(), dropped
            # Drop, oldest first, about as many entries as the overshoot costs (at least
            # one), then recount: a few recounts even for a large draft.
            k, freed = 0, 0
            while k < len(queue) and freed < over:
                freed += cost(queue[k])
                k += 1
            if is_fact:
                k = min(k, sum(len(f) for f in facts.values()) - 1)
                if k <= 0:
                    break
                gone = {id(f) for f in queue[:k]}
                for name in FACT_FIELDS:
                    facts[name] = [f for f in facts[name] if id(f) not in gone]
            del queue[:k]
            dropped += k
    _clip_last(facts, build, bound, count)
    return build(), dropped


def _refs_by_trace(refs: list[str], facts: dict[str, list[Fact]]) -> tuple[list[str], list[str]]:
    """``refs`` an entry names (said already: they go first) and those no entry names
    (the only trace of that file: they go after)."""
    said = " ".join(f.statement for name in FACT_FIELDS for f in facts[name])
    return [r for r in refs if r in said], [r for r in refs if r not in said]


def _clip_last(
    facts: dict[str, list[Fact]], build: Callable[[], SummaryDraft], bound: int, count: CountFn
) -> None:
    """The entries left are over the bound by themselves: a model's overlong statement,
    or its long list of citations. Clip each statement, marked, keeping two citations;
    if that is not enough, start again from the whole statement with one citation (the
    citations may have been all that was over). Coverage is by range (R11.4),
    so a citation less never leaves a covered record unaccounted for; the bound holds
    (MIN_BOUND leaves room for a section title, one record id and a stub)."""
    for name in FACT_FIELDS:
        for i, f in enumerate(facts[name]):
            for keep_ids, floor in ((2, 16), (1, 0)):
                if count(build().text()) <= bound:
                    return
                statement = f.statement
                ids = f.source_ids[:keep_ids]
                facts[name][i] = dataclasses.replace(f, statement=statement, source_ids=ids)
                while count(build().text()) > bound and len(statement) > floor:
                    statement = _clipped(statement)
                    facts[name][i] = dataclasses.replace(f, statement=statement, source_ids=ids)


def _clipped(statement: str) -> str:
    """``statement`` shortened by about a quarter, marked; strictly shorter, down to ''."""
    body = statement.removesuffix("…")
    cut = min(len(body) - 1, len(body) * 3 // 4)
    return body[:cut].rstrip() + "…" if cut > 0 else ""
