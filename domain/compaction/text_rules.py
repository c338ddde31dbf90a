"""The text rules a draft passes before it becomes a summary (R11.4, R11.5). Pure.

A rule reads an entry's words, and words are a guess: so a rule never refuses a draft. It
frames or marks one entry and records what it did (``RuleDecision``, kept with the summary
for diagnostics and the inspector). A job fails only for structural reasons
(``STRUCTURAL_FAILURES``). The rules run once, on the merged draft of a job — whatever
summarizer wrote it, a model or the built-in one — after any roll-up and hook:

- ``plan_item_named``: an entry that names a current plan item (its whole text or its id,
  any language) is dated to the plan it was written under ("earlier (plan v3): …"), so what
  it says of the item's status is history beside the plan block, never its current status;
- ``plan_state_prefix``: an entry that reads like a directive setting the plan or the task
  ("PLAN: …", "TASK: …", "SYSTEM: …") is framed as the past it quotes;
- ``constraint_repeated``: a declared constraint an entry repeats is replaced by a marker
  (``domain.frontier.without_constraints``): constraints render from their own records.

An entry recorded by its author (``origin == "recorded"``: a decision or question the agent
or the user recorded, ``domain.compaction.authored``) is kept verbatim: no rule reads it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from domain.compaction.drafts import FACT_FIELDS, RECORDED, Fact, SummaryDraft
from domain.frontier import Plan, named_item, plan_contradiction, without_constraints

# What may fail a job: the draft's shape, its citations, its coverage and its size —
# never what its words seem to say (``tests/unit/test_text_rules.py`` pins this list).
STRUCTURAL_FAILURES = frozenset(
    {
        "unparseable",
        "missing_field",
        "empty",
        "empty_statement",
        "uncited",
        "unknown_source_id",
        "source_out_of_range",
        "coverage_gap",
        "too_long",
    }
)
PLAN_STATE_PREFIXES = ("PLAN:", "TASK:", "SYSTEM:")
_FRAMED = re.compile(r"^earlier(?: \(plan v\d+\))?: ")


def claims_plan_state(text: str) -> bool:
    """Whether ``text`` reads like a directive setting plan, task or system state."""
    return text.lstrip().upper().startswith(PLAN_STATE_PREFIXES)


def framed(statement: str) -> bool:
    """Whether ``statement`` is already framed as the past by a rule."""
    return _FRAMED.match(statement) is not None


def past(statement: str, plan: Plan) -> str:
    """``statement`` framed as history of the plan it was written under."""
    if framed(statement):
        return statement
    when = f" (plan v{plan.version})" if plan.version else ""
    return f"earlier{when}: {statement}"


@dataclass(frozen=True)
class RuleDecision:
    """What one rule did to one entry."""

    rule: str  # plan_item_named | plan_state_prefix | constraint_repeated
    action: str  # framed | marked
    field: str
    index: int
    source_ids: tuple[str, ...]
    item_id: str | None = None
    stated: str | None = None  # the status the entry stated of the item, when it stated one

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rule": self.rule,
            "action": self.action,
            "field": self.field,
            "index": self.index,
            "source_ids": list(self.source_ids),
        }
        if self.item_id is not None:
            out["item_id"] = self.item_id
        if self.stated is not None:
            out["stated"] = self.stated
        return out


def apply_text_rules(
    draft: SummaryDraft, plan: Plan, declared: Sequence[str] = ()
) -> tuple[SummaryDraft, tuple[RuleDecision, ...]]:
    """``draft`` with every rule applied to every entry and note, and what each did."""
    decisions: list[RuleDecision] = []
    sections: dict[str, tuple[Fact, ...]] = {}
    for name in FACT_FIELDS:
        facts = getattr(draft, name)
        sections[name] = tuple(
            _entry(f, name, k, plan, declared, decisions) for k, f in enumerate(facts)
        )
    notes = tuple(
        past(n, plan) if claims_plan_state(n) and not framed(n) else n for n in draft.observations
    )
    for k, n in enumerate(draft.observations):
        if notes[k] != n:
            decisions.append(RuleDecision("plan_state_prefix", "framed", "observations", k, ()))
    out = dataclasses.replace(
        draft,
        verified_facts=sections["verified_facts"],
        decisions=sections["decisions"],
        failures=sections["failures"],
        unresolved_questions=sections["unresolved_questions"],
        observations=notes,
    )
    return out, tuple(decisions)


def _entry(
    fact: Fact,
    field: str,
    index: int,
    plan: Plan,
    declared: Sequence[str],
    decisions: list[RuleDecision],
) -> Fact:
    if fact.origin == RECORDED:
        return fact  # the author's own record, kept verbatim: no guess reads it
    statement = fact.statement
    if declared:
        marked = without_constraints(statement, declared)
        if marked != statement:
            decisions.append(
                RuleDecision("constraint_repeated", "marked", field, index, fact.source_ids)
            )
            statement = marked
    if not framed(statement):
        item = named_item(statement, plan) if plan.items else None
        if item is not None:
            found = plan_contradiction(statement, plan)
            decisions.append(
                RuleDecision(
                    "plan_item_named",
                    "framed",
                    field,
                    index,
                    fact.source_ids,
                    item.item_id,
                    found[1] if found else None,
                )
            )
            statement = past(statement, plan)
        elif claims_plan_state(statement):
            decisions.append(
                RuleDecision("plan_state_prefix", "framed", field, index, fact.source_ids)
            )
            statement = past(statement, plan)
    return fact if statement == fact.statement else dataclasses.replace(fact, statement=statement)
