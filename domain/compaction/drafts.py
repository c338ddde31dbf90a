"""Summary request/result contracts for the compaction gateway (R11.3, R11.7). Pure.

A ``SummaryDraft`` holds only historical content — facts, decisions, failures and open
questions, each citing source record ids (R11.5, R11.7). Task, constraints and plan come
from their own sources and are never part of a draft.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from domain.compaction.errors import InvalidSummary
from domain.frontier import Plan
from domain.usage import Usage

COMPACTION_PURPOSE = "compaction"
FACT_FIELDS = ("verified_facts", "decisions", "failures", "unresolved_questions")
SECTION_TITLES = {
    "verified_facts": "Facts",
    "decisions": "Decisions",
    "failures": "Failures",
    "unresolved_questions": "Open questions",
}


@dataclass(frozen=True)
class SourceItem:
    """One source record of a segment, flattened for summarizing.

    ``call_id`` links a tool call record to its outcome; an ``assistant_message`` that
    made tool calls carries the id of one of them (any), so that summarizers can tell a
    final answer (no ``call_id``) from a step that only dispatched tools. ``arguments``
    holds ``(tool name, arguments JSON)`` of every call the record made — an assistant
    message's calls, or a ``tool_call`` record's own — so that a file that was only
    read is still known.
    """

    record_id: str
    session_sequence: int
    kind: str
    role: str
    text: str
    tool_name: str | None = None
    tool_status: str | None = None
    call_id: str | None = None
    arguments: tuple[tuple[str, str], ...] = ()
    # Authored records (``domain.compaction.authored``): a question's key (an opened
    # question's own event key, or the one a closing names), and a decision's reason or a
    # closing's answer.
    question_key: str = ""
    detail: str = ""


@dataclass(frozen=True)
class SummaryRequest:
    segment: tuple[SourceItem, ...]
    previous_summary_text: str | None
    max_output_tokens: int
    model_operation_id: str
    purpose: str = COMPACTION_PURPOSE
    # the thread's current plan. A summary is history: it never states one of
    # these items' status otherwise (R11.4); the plan renders from its own record.
    plan: Plan = field(default_factory=Plan)
    # Every constraint text set in the session: rendered from its own records, never
    # restated by a summary (R11.5), in force or retired.
    constraints: tuple[str, ...] = ()
    # The agent's last rendered request of the thread, when the summarizer is the agent's
    # model and that request shows the whole segment: the call continues it and reads
    # the covered history from the provider's cache (domain.summarizer.fork). None: the
    # summarizer's own request.
    fork: Mapping[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # R11.3: the gateway exists for compaction only; a different purpose here is a
        # wiring bug, not something an adapter should quietly serve.
        if self.purpose != COMPACTION_PURPOSE:
            raise ValueError(f"summary requests have purpose 'compaction', not {self.purpose!r}")
        if not self.segment:
            raise ValueError("a summary request needs at least one source record")
        if self.max_output_tokens <= 0:
            raise ValueError("max_output_tokens must be positive")

    @property
    def source_ids(self) -> frozenset[str]:
        return frozenset(item.record_id for item in self.segment)


def one_line(text: str) -> str:
    """Collapse whitespace so that a statement renders as exactly one line."""
    return " ".join(text.split())


RECORDED = "recorded"  # a Fact's origin: an authored record's entry, kept verbatim


@dataclass(frozen=True)
class Fact:
    statement: str
    source_ids: tuple[str, ...]
    # Where the entry comes from: ``RECORDED`` for an authored record (a decision or a
    # question recorded explicitly, ``domain.compaction.authored``), kept verbatim and
    # never dropped before other entries; "" for what a summarizer derived.
    origin: str = ""
    # A recorded question's key (its event key): what a ``question_closed`` names.
    key: str = ""

    @property
    def recorded(self) -> bool:
        return self.origin == RECORDED

    def line(self) -> str:
        """The rendered markdown line; ``SummaryDraft.text`` is made of these."""
        return f"- {one_line(self.statement)} [{', '.join(self.source_ids)}]"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"statement": self.statement, "source_ids": list(self.source_ids)}
        # Only when set: summaries stored before these fields keep their exact shape.
        if self.origin:
            out["origin"] = self.origin
        if self.key:
            out["key"] = self.key
        return out


@dataclass(frozen=True)
class SummaryDraft:
    verified_facts: tuple[Fact, ...]
    decisions: tuple[Fact, ...]
    failures: tuple[Fact, ...]
    unresolved_questions: tuple[Fact, ...]
    work_artifact_refs: tuple[str, ...]
    observations: tuple[str, ...]

    def sections(self) -> tuple[tuple[str, tuple[Fact, ...]], ...]:
        return tuple((name, getattr(self, name)) for name in FACT_FIELDS)

    def all_facts(self) -> tuple[Fact, ...]:
        return self.verified_facts + self.decisions + self.failures + self.unresolved_questions

    def cited_ids(self) -> frozenset[str]:
        return frozenset(sid for fact in self.all_facts() for sid in fact.source_ids)

    def is_empty(self) -> bool:
        return not self.all_facts()

    def text(self) -> str:
        """Compact markdown for the model; empty sections are left out."""
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        """``text``'s lines: a section's title, then its entries."""
        parts: list[str] = []
        for name, facts in self.sections():
            if facts:
                parts.append(f"## {SECTION_TITLES[name]}")
                parts.extend(fact.line() for fact in facts)
        if self.work_artifact_refs:
            parts.append("## Artifacts")
            parts.extend(f"- {one_line(ref)}" for ref in self.work_artifact_refs)
        if self.observations:
            parts.append("## Notes")
            parts.extend(f"- {one_line(obs)}" for obs in self.observations)
        return parts

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            name: [f.to_dict() for f in facts] for name, facts in self.sections()
        }
        out["work_artifact_refs"] = list(self.work_artifact_refs)
        out["observations"] = list(self.observations)
        return out

    @staticmethod
    def from_dict(data: Any) -> SummaryDraft:
        """Parse a JSON object; raises ``InvalidSummary`` (``missing_field`` or
        ``unparseable``). The two string lists may be absent: models often drop empty
        arrays, and an absent list loses nothing."""
        if not isinstance(data, Mapping):
            raise InvalidSummary("summary is not a JSON object", reason="unparseable")
        facts: dict[str, tuple[Fact, ...]] = {}
        for name in FACT_FIELDS:
            if name not in data:
                raise InvalidSummary(f"summary lacks {name!r}", reason="missing_field", field=name)
            facts[name] = tuple(_fact(item, name) for item in _list(data[name], name))
        return SummaryDraft(
            **facts,
            work_artifact_refs=_strings(data.get("work_artifact_refs", []), "work_artifact_refs"),
            observations=_strings(data.get("observations", []), "observations"),
        )


def _list(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidSummary(f"{field!r} is not a list", reason="unparseable", field=field)
    return value


def _strings(value: Any, field: str) -> tuple[str, ...]:
    items = _list(value, field)
    if not all(isinstance(s, str) for s in items):
        raise InvalidSummary(f"{field!r} holds non-strings", reason="unparseable", field=field)
    return tuple(items)


def _fact(item: Any, field: str) -> Fact:
    if not isinstance(item, Mapping) or "statement" not in item or "source_ids" not in item:
        raise InvalidSummary(
            f"an entry of {field!r} lacks statement/source_ids", reason="missing_field", field=field
        )
    statement = item["statement"]
    if not isinstance(statement, str):
        raise InvalidSummary("a statement is not a string", reason="unparseable", field=field)
    origin, key = item.get("origin", ""), item.get("key", "")
    if not isinstance(origin, str) or not isinstance(key, str):
        raise InvalidSummary("an origin or key is not a string", reason="unparseable", field=field)
    return Fact(statement, _strings(item["source_ids"], f"{field}.source_ids"), origin, key)


@dataclass(frozen=True)
class SummaryResult:
    draft: SummaryDraft
    model_operation_id: str
    input_tokens: int  # real usage reported by the model; 0 when no model ran (R18)
    output_tokens: int
    elapsed_ms: float
    adapter: str
    # the provider's usage, cached input and reasoning kept (domain.usage); None: the
    # model reported none and the caller counts what it read and wrote.
    usage: Usage | None = None
    # False: no model ran (the built-in extractive summarizer): nothing to bill, and the
    # caller's counts of what it read and wrote are diagnostics, never usage (R18).
    model_call: bool = True
    # The model the adapter asked and its provider (``gen_ai.provider.name``: "openai",
    # "anthropic"), for the call's GenAI span; empty when no model ran.
    model: str = ""
    provider: str = ""
