"""Rules for the payloads of particular kinds (assistant messages, retractions, plans,
constraints, decisions and questions): pure, used by ``schemas.validation``. Each
rejection has a ``reason_code``."""

from __future__ import annotations

import re

from schemas.contracts import (
    AssistantMessagePayload,
    ConstraintPayload,
    ContextEvent,
    DecisionPayload,
    PlanPayload,
    PlanStatus,
    QuestionPayload,
    RecordKind,
    RetractionPayload,
)
from schemas.errors import InvalidEvent
from schemas.json_text import parse_json

RECORD_ID = re.compile(r"rec_[0-9a-f]{32}")  # domain.planning.state.record_id_for
# Sizes, counts, sequences, revisions and timestamps: 0 <= n <= 2^53 (exact as JSON
# numbers and doubles; sums of a few stay inside a bigint).
MAX_COUNT = 2**53

# Bounds of the execution frontier's state (it renders in every action context).
MAX_PLAN_ITEMS = 100
MAX_PLAN_ITEM_CHARS = 500  # an item's text, and its note
MAX_PLAN_CHARS = 12_000  # the texts and notes of a whole plan
MAX_PLAN_EXPLANATION_CHARS = 2000
MAX_CONSTRAINT_BYTES = 4096
# Authored records are kept verbatim in every summary: bounded like a constraint.
MAX_DECISION_BYTES = 4096  # the decision's text, and its reason
MAX_QUESTION_BYTES = 4096  # the question's text, and a closing's answer
# One line each: a line break in an item could forge a block of its own in the render
# (a model writes its plan; a "constraints" block inside it would be an injection).
_BREAK = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]")
CONSTRAINT_SCOPES = frozenset({"session", "run"})


def fail(code: str, message: str) -> InvalidEvent:
    return InvalidEvent(message, reason_code=code)


def within(where: str, value: str, max_bytes: int, code: str = "text_too_large") -> int:
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise fail(code, f"{where} is {size} bytes, over {max_bytes}")
    return size


def count(where: str, value: object, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail("bad_size", f"{where} is not an integer")
    if not minimum <= value <= MAX_COUNT:
        raise fail("bad_size", f"{where} = {value} is outside {minimum}..{MAX_COUNT}")


def validate_retraction(ev: ContextEvent, p: RetractionPayload) -> None:
    """A retraction names a well-formed record id, and its operation is that id: R3.1's
    scope + operation_id + kind then makes a second retraction of the same record a
    duplicate, and the processor knows the target before planning (storage.records.retraction)."""
    if not RECORD_ID.fullmatch(p.target_record_id):
        raise fail("bad_retraction_target", "target_record_id is not a record id (rec_ + 32 hex)")
    if ev.operation_id != p.target_record_id:
        raise fail("bad_retraction_target", "a retraction's operation_id is its target_record_id")


def validate_assistant(p: AssistantMessagePayload) -> None:
    if p.purpose not in ("action", "compaction", "completion", "verification"):
        raise fail("bad_purpose", f"unknown purpose {p.purpose!r}")
    for usage in (p.usage_input_tokens, p.usage_output_tokens):
        if usage is not None:
            count("payload.usage", usage)
    seen: set[str] = set()
    for call in p.tool_calls:
        if not call.call_id or call.call_id in seen:
            raise fail("bad_tool_call", f"tool call id {call.call_id!r} empty or repeated")
        seen.add(call.call_id)
        parse_json(call.arguments_json, f"arguments of {call.call_id}", "bad_tool_arguments")


def validate_plan(p: PlanPayload) -> None:
    """An ordered list of at most MAX_PLAN_ITEMS items, each with a unique id, a
    one-line text (and note) within MAX_PLAN_ITEM_CHARS and a known status, the whole
    within MAX_PLAN_CHARS: it renders, required, in every action context."""
    if len(p.items) > MAX_PLAN_ITEMS:
        raise fail("bad_plan", f"a plan holds at most {MAX_PLAN_ITEMS} items, got {len(p.items)}")
    if p.explanation is not None and len(p.explanation) > MAX_PLAN_EXPLANATION_CHARS:
        raise fail("bad_plan", f"explanation is over {MAX_PLAN_EXPLANATION_CHARS} characters")
    seen: set[str] = set()
    for i, item in enumerate(p.items):
        if not item.item_id or item.item_id in seen:
            raise fail("bad_plan", f"items[{i}].item_id {item.item_id!r} is empty or repeated")
        seen.add(item.item_id)
        for name, text in (("text", item.text), ("note", item.note or "")):
            if len(text) > MAX_PLAN_ITEM_CHARS or _BREAK.search(text):
                raise fail(
                    "bad_plan",
                    f"items[{i}].{name} must be one line of {MAX_PLAN_ITEM_CHARS}"
                    " characters at most",
                )
        if not item.text.strip():
            raise fail("bad_plan", f"items[{i}].text is empty")
        if item.status not in _PLAN_STATUSES:
            raise fail(
                "bad_plan_status",
                f"items[{i}].status {item.status!r} is not one of {sorted(_PLAN_STATUSES)}",
            )
    total = sum(len(i.text) + len(i.note or "") for i in p.items)
    if total > MAX_PLAN_CHARS:
        raise fail(
            "bad_plan", f"the plan's texts and notes are {total} characters, over {MAX_PLAN_CHARS}"
        )


_PLAN_STATUSES = frozenset(str(s) for s in PlanStatus)


def validate_constraint(ev: ContextEvent, p: ConstraintPayload) -> None:
    """A constraint has an id and a scope; a declared one carries its text
    inline (it renders verbatim in every action context); a run-scoped one names its run."""
    if p.scope not in CONSTRAINT_SCOPES:
        raise fail("bad_constraint", f"scope {p.scope!r} is not one of session, run")
    if p.scope == "run" and not ev.scope.run_id:
        raise fail("bad_constraint", "a run-scoped constraint needs scope.run_id")
    if p.source_record_id is not None and not RECORD_ID.fullmatch(p.source_record_id):
        raise fail("bad_constraint", "source_record_id is not a record id (rec_ + 32 hex)")
    if ev.kind is not RecordKind.CONSTRAINT_SET:
        return
    text = ev.content.inline
    if text is None or not text.strip():
        raise fail("bad_constraint", "a constraint's text is its inline content, not empty")
    within("constraint text", text, MAX_CONSTRAINT_BYTES, "bad_constraint")


def validate_authored(ev: ContextEvent, p: DecisionPayload | QuestionPayload) -> None:
    """A decision or a question (or its closing), by its payload."""
    if isinstance(p, DecisionPayload):
        validate_decision(ev, p)
    else:
        validate_question(ev, p)


def validate_decision(ev: ContextEvent, p: DecisionPayload) -> None:
    """A decision carries its text inline (every summary keeps it verbatim), not empty,
    with its reason, each within MAX_DECISION_BYTES."""
    text = ev.content.inline
    if text is None or not text.strip():
        raise fail("bad_decision", "a decision's text is its inline content, not empty")
    within("decision text", text, MAX_DECISION_BYTES, "bad_decision")
    if p.reason is not None:
        within("decision reason", p.reason, MAX_DECISION_BYTES, "bad_decision")


def validate_question(ev: ContextEvent, p: QuestionPayload) -> None:
    """An opened question carries its text inline and names itself (``question_key`` is
    its own event key, so a closing can name it); a closing names another event's key
    and may carry an answer. Texts within MAX_QUESTION_BYTES."""
    if not p.question_key:
        raise fail("bad_question", "question_key is empty")
    if ev.kind is RecordKind.QUESTION_OPENED:
        if p.question_key != ev.event_key:
            raise fail("bad_question", "an opened question's question_key is its own event_key")
        if p.answer is not None:
            raise fail("bad_question", "an opened question has no answer yet")
        text = ev.content.inline
        if text is None or not text.strip():
            raise fail("bad_question", "a question's text is its inline content, not empty")
        within("question text", text, MAX_QUESTION_BYTES, "bad_question")
        return
    if p.question_key == ev.event_key:
        raise fail("bad_question", "a closing names the opened question's key, not its own")
    if p.answer is not None:
        within("answer", p.answer, MAX_QUESTION_BYTES, "bad_question")
