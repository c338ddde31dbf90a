"""The execution frontier (R4.4, R11.4-R11.6, R13.1): a thread's current plan and
the session's user constraints, folded from their own records. Pure.

They are state of record, never history to be summarized: ``plan_updated`` carries the
whole plan of a thread (each update is the thread's next plan version; a child thread has
its own), ``constraint_set`` declares a constraint (setting an id again is its next
version, shown once), ``constraint_retired`` ends one. Every action context renders the
active constraints and the current plan verbatim as required blocks of their own, after
the thread, so a plan update only changes the end of a request (the prefix a provider's
prompt cache serves stays as it was).

A summary is history: what it says of a plan item is dated to the plan it was written
under (``named_item``, ``domain.compaction.text_rules``), so it never reads as the current
status beside the plan block (R11.4). ``plan_contradiction`` tells which status a sentence
states of an item: a diagnostic, never a reason to refuse a summary.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The plan and the constraints in force are the records the prepared context publishes
# (``schemas.answers.prepared``), declared there once and the frontier's here.
from schemas.answers.prepared import Constraint as Constraint
from schemas.answers.prepared import Plan as Plan
from schemas.contracts import PlanItem

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
    withdrawn: bool = False  # a constraint whose source input was retracted


Item = PlanItem  # a plan's item is the event's (schemas.contracts)


@dataclass(frozen=True)
class Frontier:
    """What a thread's action context pins beside its history, with its versions."""

    plan: Plan = field(default_factory=Plan)
    constraints: tuple[Constraint, ...] = ()
    constraints_version: int = 0  # constraint records (declared or retired) of the view
    task_version: int = 0  # user inputs and supplements of the thread (only grows)
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
    return Plan(
        version=updates,
        record_id=latest.record_id,
        explanation=latest.payload.get("explanation"),
        items=items,
    )


def declared_texts(records: Iterable[FrontierRecord]) -> tuple[str, ...]:
    """Every constraint text set in ``records``, in force or retired, once each."""
    ordered = sorted(records, key=lambda r: r.session_sequence)
    return tuple(dict.fromkeys(r.text for r in ordered if r.kind == CONSTRAINT_SET and r.text))


def active_constraints(
    records: Iterable[FrontierRecord], run_id: str | None
) -> tuple[tuple[Constraint, ...], int]:
    """The constraints in force for ``run_id`` and how many constraint records there were
    (the version). One per id and scope, at its latest version, in the order first given.
    A run-scoped declaration of a session constraint's id holds beside it (the session one
    outlives the run); a retirement ends the id in every scope. Declaring the text of a
    constraint in force under another id (the user repeating the host's rule) is that
    constraint's next version, and retiring either id ends it."""
    versions: dict[str, int] = {}
    alias: dict[str, str] = {}  # an id -> the constraint it repeats
    active: dict[tuple[str, str], Constraint] = {}  # insertion order = the order given
    seen = 0
    for r in sorted(records, key=lambda r: r.session_sequence):
        if r.kind not in (CONSTRAINT_SET, CONSTRAINT_RETIRED):
            continue
        seen += 1
        if r.withdrawn:  # its source input was retracted: as if never declared
            continue
        cid = str(r.payload.get("constraint_id"))
        cid = alias.get(cid, cid)
        if r.kind == CONSTRAINT_RETIRED:
            for key in [k for k in active if k[0] == cid]:
                del active[key]
            continue
        same = next((c for c in active.values() if _same(c.text, r.text)), None)
        if same is not None and same.constraint_id != cid:
            alias[cid], cid = same.constraint_id, same.constraint_id
        versions[cid] = versions.get(cid, 0) + 1
        scope = str(r.payload.get("scope") or "session")
        source = r.payload.get("source_record_id")
        active[(cid, scope)] = Constraint(
            cid, r.text, scope, versions[cid], r.record_id, source, r.run_id
        )
    shown: dict[str, Constraint] = {}  # one rule shown once, in whichever scopes it holds
    for c in active.values():
        if c.scope == "session" or c.run_id == run_id:
            shown.setdefault(_normal(c.text), c)
    return tuple(shown.values()), seen


def _same(a: str, b: str) -> bool:
    """One rule, whatever its case, spacing or final full stop."""
    return _normal(a) == _normal(b)


def _normal(text: str) -> str:
    return " ".join(text.casefold().split()).rstrip(".!;: ")


def constraint_id_for(text: str) -> str:
    """A constraint's identity when the host names none: its normalized text, so the user
    repeating a rule (other case, spacing, a final full stop) is the same constraint."""
    return "con_" + hashlib.sha256(_normal(text).encode()).hexdigest()[:16]


# --- rendering --------------------------------------------------------------------------


def constraints_text(constraints: Sequence[Constraint], version: int) -> str:
    lines = [
        f"[user constraints in force — state of record, constraints v{version}; they hold"
        " until the user retires them]"
    ]
    # A line break stays inside its constraint: continuation lines are indented.
    lines.extend("- " + "\n  ".join(c.text.splitlines() or [""]) for c in constraints)
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
    "pending": ("pending", "not started", "planned"),  # a "TODO:" is a note, not a status
    "blocked": ("blocked",),
    "dropped": ("dropped", "abandoned", "cancelled", "canceled"),
}
_WORD_STATUS = {w: status for status, words in _STATUS_WORDS.items() for w in words}
_LONGEST_FIRST = sorted(_WORD_STATUS, key=len, reverse=True)
_WORDS = "(?:" + "|".join(re.escape(w) for w in _LONGEST_FIRST) + r")(?![\w-])"
_ANY_STATUS = re.compile(r"(?<![\w-])" + _WORDS)
# How a sentence states an item's status, said of the item itself: "X is done", "X has been
# completed", "X: blocked", "X — now dropped", "[done] X", "done: X", "completed X". A status
# word elsewhere (another item's, a tool's "done in 3 s") states nothing about X.
_IS = (
    r"\s*(?:\(id [^)]*\)\s*)?(?:(?:is|are|has been|have been|got|:|\u2014|\u2013|\u2192|->)"
    r"\s*)?(?:now |still |currently |already |fully )?(?:marked (?:as )?)?"
)
_VERBS = r"(?:completed|finished|dropped|abandoned)"
# The whole item or status word, not a prefix of a longer phrase ("done in 3 s").
_END = r"(?=\s*(?:$|[.,;:!?)\]\u2014\u2013\u3002\uff01\uff1f\uff0c]|\(id|- ))"
# A sentence that asks or wonders states no status; one framed as the past reports history.
_ASKS = re.compile(
    r"\?\s*$|\b(?:whether|unclear|not sure|unknown|todo|find out|open question|wonder)\b"
)
_PAST = re.compile(
    r"\b(?:earlier|previously|formerly|at the time|at that point|back then|plan v\d+)\b"
)
_SENTENCES = re.compile(r"(?<=[.;!?])\s+|(?<=[\u3002\uff01\uff1f])|\n")
MIN_ITEM_CHARS = 8  # shorter item texts are too common words to be recognised in prose


# Scripts written without spaces between words: a name in them has no word boundary.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@functools.lru_cache(maxsize=4096)
def _item_name(item_id: str, text: str) -> str:
    """The pattern that names this item in a sentence: its whole text (spacing and
    punctuation aside; at least ``MIN_ITEM_CHARS``) or ``id <id>``."""
    words = re.findall(r"\w+", text.casefold())
    names = [r"\bid " + re.escape(item_id.casefold()) + r"(?!\w)"]
    if len(" ".join(words)) >= MIN_ITEM_CHARS or (words and _UNSPACED.search(text)):
        start = "" if _UNSPACED.match(words[0]) else r"(?<!\w)"
        end = "" if _UNSPACED.search(words[-1][-1]) else r"(?!\w)"
        names.insert(0, start + r"[\W_]*".join(re.escape(w) for w in words) + end)
    return "(?:" + "|".join(names) + ")"


@functools.lru_cache(maxsize=4096)
def _item_regex(item_id: str, text: str) -> re.Pattern[str]:
    """One pattern for every way a sentence states a status of this item (compiled once:
    a plan of a hundred items is checked against every summary statement)."""
    name = _item_name(item_id, text)
    forms = (
        rf"{name}{_IS}(?P<a>{_WORDS}){_END}",
        rf"\[(?P<b>{_WORDS})\]\s*{name}{_END}",
        rf"(?<![\w-])(?P<c>{_WORDS})\s*:\s*{name}{_END}",
        rf"(?<![\w-])(?P<d>{_VERBS})\s+(?:the\s+)?{name}{_END}",
    )
    return re.compile("|".join(forms))


@functools.lru_cache(maxsize=4096)
def _name_regex(item_id: str, text: str) -> re.Pattern[str]:
    return re.compile(_item_name(item_id, text))


def named_item(statement: str, plan: Plan) -> Item | None:
    """The first item of ``plan`` that ``statement`` names (by its whole text or its id),
    in any language: what a summary says of it is about that item's status then."""
    low = statement.casefold()
    return next((i for i in plan.items if _name_regex(i.item_id, i.text).search(low)), None)


def _stated(sentence: str, item: Item) -> str | None:
    """The status ``sentence`` states of ``item`` (None: it states none)."""
    m = _item_regex(item.item_id, item.text).search(sentence)
    if m is None:
        return None
    word = next(g for g in m.groups() if g is not None)
    return _WORD_STATUS.get(" ".join(word.replace("_", " ").replace("-", " ").split()), "done")


def plan_contradiction(statement: str, plan: Plan) -> tuple[Item, str] | None:
    """The current plan item ``statement`` states another status of, and that status.

    A sentence states an item's status when the status word is said of the item itself
    ("X is done", "X has been completed", "X: blocked", "[done] X", "done: X",
    "completed X"; the item named by its whole text or by ``id <id>``), in the present. A
    sentence that asks or wonders ("…?", "whether", "TODO") states none; one framed as the
    past ("earlier", "previously", "at plan v3" …) reports history, and so does a
    statement framed "earlier: …" as a whole. None when no sentence states an item
    otherwise.
    """
    low = statement.casefold()
    if not plan.items or low.lstrip().startswith("earlier:"):
        return None
    for sentence in _SENTENCES.split(low):
        if not _ANY_STATUS.search(sentence) or _ASKS.search(sentence) or _PAST.search(sentence):
            continue
        for item in plan.items:
            stated = _stated(sentence, item)
            if stated is not None and stated != item.status:
                return item, stated
    return None


def without_constraints(statement: str, declared: Sequence[str]) -> str:
    """``statement`` with each declared constraint it repeats as a sentence or a part of
    its own (case and spacing aside: "Q: Never use tabs. → A: …") replaced by a marker
    (R11.5): constraints render from their own records while in force, and a retired one
    never comes back through a summary. Words of a constraint inside another sentence
    ("we decided to use Python 3.12") are that sentence's, and stay. Longer constraints
    first, so one that contains another is marked whole."""
    for text in sorted(set(declared), key=lambda t: (-len(t), t)):
        words = re.findall(r"\w+", text.casefold())
        if len(" ".join(words)) < MIN_ITEM_CHARS:
            continue
        body = r"[\W_]+".join(re.escape(w) for w in words)
        pattern = _PART_START + body + _PART_END
        statement = re.sub(pattern, rf"\g<1>{CONSTRAINT_MARK}", statement, flags=re.I)
    return statement


# Where a part of a statement begins and ends: its start or end, sentence punctuation,
# the separators summaries join parts with (" → ", " | ", "; "), quotes and brackets.
_PART_START = r"(^\s*(?:[-*\u2022]\s+)?|[.!?;:|\u2192>\"'(\[]\s*)"
_PART_END = r"(?:[.!?;:](?=\s)|[.!?;:]?(?=\s*(?:$|[|\u2192;\"')\]])))"
CONSTRAINT_MARK = "(a user constraint: shown on its own while in force)"
