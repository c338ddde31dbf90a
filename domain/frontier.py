"""The execution frontier (issue 24; R4.4, R11.4-R11.6, R13.1): a thread's current plan and
the session's user constraints, folded from their own records. Pure.

They are state of record, never history to be summarized: ``plan_updated`` carries the
whole plan of a thread (each update is the thread's next plan version; a child thread has
its own), ``constraint_set`` declares a constraint (setting an id again is its next
version, shown once), ``constraint_retired`` ends one. Every action context renders the
active constraints and the current plan verbatim as required blocks of their own, after
the thread, so a plan update only changes the end of a request (the prefix a provider's
prompt cache serves stays as it was).

A summary is history: it may say what an earlier plan said as a past event, never state a
current plan item's status differently from the plan (``plan_contradiction``, R11.4).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PLAN_UPDATED = "plan_updated"
CONSTRAINT_SET = "constraint_set"
CONSTRAINT_RETIRED = "constraint_retired"
FRONTIER_KINDS = frozenset({PLAN_UPDATED, CONSTRAINT_SET, CONSTRAINT_RETIRED})
STATUSES = ("pending", "in_progress", "done", "blocked", "dropped")


@dataclass(frozen=True)
class FrontierRecord:
    """One plan or constraint record as the frontier reads it."""

    record_id: str
    session_sequence: int
    kind: str
    run_id: str | None
    text: str
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class Item:
    item_id: str
    text: str
    status: str
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "item_id": self.item_id,
            "text": self.text,
            "status": self.status,
            "note": self.note,
        }


@dataclass(frozen=True)
class Plan:
    """A thread's current plan; version 0 is "no plan yet"."""

    version: int = 0
    items: tuple[Item, ...] = ()
    record_id: str | None = None
    explanation: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "record_id": self.record_id,
            "explanation": self.explanation,
            "items": [i.to_dict() for i in self.items],
        }


@dataclass(frozen=True)
class Constraint:
    constraint_id: str
    text: str
    scope: str  # session | run
    version: int  # declarations of this id so far
    record_id: str  # the declaration in force
    source_record_id: str | None
    run_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "constraint_id": self.constraint_id,
            "text": self.text,
            "scope": self.scope,
            "version": self.version,
            "record_id": self.record_id,
            "source_record_id": self.source_record_id,
            "run_id": self.run_id,
        }


@dataclass(frozen=True)
class Frontier:
    """What a thread's action context pins beside its history, with its versions."""

    plan: Plan = field(default_factory=Plan)
    constraints: tuple[Constraint, ...] = ()
    constraints_version: int = 0  # constraint records (declared or retired) of the view
    task_version: int = 0  # user inputs and supplements of the thread
    declared: tuple[str, ...] = ()  # every constraint text ever set: never a summary's fact

    def versions(self) -> dict[str, int]:
        return {
            "task_version": self.task_version,
            "plan_version": self.plan.version,
            "constraints_version": self.constraints_version,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.versions(),
            "plan": self.plan.to_dict(),
            "constraints": [c.to_dict() for c in self.constraints],
        }


def plan_of(latest: FrontierRecord | None, updates: int) -> Plan:
    """The thread's plan: its latest update, as version ``updates`` (the count of them)."""
    if latest is None:
        return Plan()
    raw = latest.payload.get("items") or []
    items = tuple(
        Item(str(i["item_id"]), str(i["text"]), str(i["status"]), i.get("note")) for i in raw
    )
    return Plan(updates, items, latest.record_id, latest.payload.get("explanation"))


def declared_texts(records: Iterable[FrontierRecord]) -> tuple[str, ...]:
    """Every constraint text set in ``records``, in force or retired, once each."""
    return tuple(dict.fromkeys(r.text for r in records if r.kind == CONSTRAINT_SET and r.text))


def active_constraints(
    records: Iterable[FrontierRecord], run_id: str | None
) -> tuple[tuple[Constraint, ...], int]:
    """The constraints in force for ``run_id`` (in the order first given; one per id, at
    its latest version) and how many constraint records there were (the version)."""
    versions: dict[str, int] = {}
    active: dict[str, Constraint] = {}  # insertion order = the order given
    seen = 0
    for r in sorted(records, key=lambda r: r.session_sequence):
        if r.kind not in (CONSTRAINT_SET, CONSTRAINT_RETIRED):
            continue
        seen += 1
        cid = str(r.payload.get("constraint_id"))
        if r.kind == CONSTRAINT_RETIRED:
            active.pop(cid, None)
            continue
        versions[cid] = versions.get(cid, 0) + 1
        scope = str(r.payload.get("scope") or "session")
        active[cid] = Constraint(
            cid,
            r.text,
            scope,
            versions[cid],
            r.record_id,
            r.payload.get("source_record_id"),
            r.run_id,
        )
    in_force = tuple(c for c in active.values() if c.scope == "session" or c.run_id == run_id)
    return in_force, seen


def constraint_id_for(text: str) -> str:
    """A constraint's identity when the host names none: its normalized text, so the user
    repeating a rule (other case, spacing, a final full stop) is the same constraint."""
    norm = " ".join(text.casefold().split()).rstrip(".!;: ")
    return "con_" + hashlib.sha256(norm.encode()).hexdigest()[:16]


# --- rendering --------------------------------------------------------------------------


def constraints_text(constraints: Sequence[Constraint], version: int) -> str:
    lines = [
        f"[user constraints in force — state of record, constraints v{version}; they hold"
        " until the user retires them]"
    ]
    lines.extend(f"- {c.text}" for c in constraints)
    return "\n".join(lines)


def plan_text(plan: Plan) -> str:
    head = (
        f"[current plan — plan v{plan.version} of this thread, state of record; any earlier"
        " plan in the history or its summary is past]"
    )
    lines = [head]
    for n, i in enumerate(plan.items, 1):
        note = f" — note: {i.note}" if i.note else ""
        lines.append(f"{n}. [{i.status}] {i.text}{note} (id {i.item_id})")
    if not plan.items:
        lines.append("(the plan is empty)")
    return "\n".join(lines)


# --- R11.4: a summary never restates the current plan -------------------------------------

# Words that state a status, by the status they state.
_STATUS_WORDS: dict[str, tuple[str, ...]] = {
    "done": ("done", "completed", "complete", "finished"),
    "in_progress": ("in progress", "in_progress", "in-progress", "underway", "ongoing"),
    "pending": ("pending", "not started", "to do", "todo", "planned"),
    "blocked": ("blocked",),
    "dropped": ("dropped", "abandoned", "cancelled", "canceled"),
}
_STATUS_RE = {
    status: re.compile(r"(?<![\w-])(" + "|".join(re.escape(w) for w in words) + r")(?![\w-])")
    for status, words in _STATUS_WORDS.items()
}
# A statement framed as the past ("was", "earlier", "at plan v3") reports history.
_PAST = re.compile(
    r"\b(was|were|had|earlier|previously|formerly|at the time|at that point|back then|"
    r"plan v\d+)\b"
)
MIN_ITEM_CHARS = 8  # shorter item texts are too common words to be recognised in prose


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", text.casefold()).split())


def plan_contradiction(statement: str, plan: Plan) -> tuple[Item, str] | None:
    """The current plan item ``statement`` states another status of, and that status.

    A statement states an item's status when it names the item (its text, or ``id <id>``)
    and a status word, in the present: one framed as the past (``was``, ``earlier``,
    ``plan v3`` …) reports history and may say anything. None when there is no such item.
    """
    low = statement.casefold()
    if not plan.items or _PAST.search(low):
        return None
    flat = _norm(statement)
    for item in plan.items:
        named = (len(item.text) >= MIN_ITEM_CHARS and _norm(item.text) in flat) or (
            f"id {item.item_id.casefold()}" in low
        )
        if not named:
            continue
        for status, pattern in _STATUS_RE.items():
            if status != item.status and pattern.search(low):
                return item, status
    return None


def without_constraints(statement: str, declared: Sequence[str]) -> str:
    """``statement`` with each declared constraint it repeats replaced by a marker (R11.5):
    constraints render from their own records while in force, and a retired one never
    comes back through a summary."""
    for text in declared:
        words = text.strip().rstrip(".!;: ").split()
        if len(" ".join(words)) < MIN_ITEM_CHARS:
            continue
        pattern = r"\s+".join(re.escape(w) for w in words) + r"[.!;:]?"
        statement = re.sub(pattern, CONSTRAINT_MARK, statement, flags=re.I)
    return statement


CONSTRAINT_MARK = "(a user constraint: shown on its own while in force)"
