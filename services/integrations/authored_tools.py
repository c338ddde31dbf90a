"""The decision and question tools (issue 36) the framework adapters offer the model
beside ``update_plan``: ``record_decision``, ``open_question``, ``close_question``.

As with the plan tool, the tool itself only answers the model; the adapter publishes the
call when it records the model's message (``publish_authored``), with keys made from the
call id, so a retried append is no second record: a decision ``decision:<call id>``, a
question ``question:<call id>`` (its key: what ``close_question`` names), a closing
``close:<question key>`` (a question is closed once). The records stay in the thread's
history and every summary keeps them verbatim and cited (``domain.compaction.authored``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from schemas.contracts import Authority
from schemas.errors import InvalidRequest
from schemas.payload_rules import MAX_DECISION_BYTES, MAX_QUESTION_BYTES
from services.sdk.client import ContextClient, RunHandle

RECORD_DECISION = "record_decision"
OPEN_QUESTION = "open_question"
CLOSE_QUESTION = "close_question"
log = logging.getLogger(__name__)


def _schema(props: dict[str, str], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": "string", "description": d} for k, d in props.items()},
        "required": required,
    }


TOOLS: dict[str, dict[str, Any]] = {
    RECORD_DECISION: {
        "name": RECORD_DECISION,
        "description": (
            "Record a decision you or the user took (what was chosen, in one or two"
            " sentences) and why. Recorded decisions are kept word for word in the"
            " history summary."
        ),
        "parameters": _schema(
            {"decision": "The decision, as you want it kept.", "reason": "Why."},
            ["decision"],
        ),
    },
    OPEN_QUESTION: {
        "name": OPEN_QUESTION,
        "description": (
            "Record a question that is still open and must not be forgotten. It stays"
            " listed as open until you call close_question with its key (the answer to"
            " this call gives the key)."
        ),
        "parameters": _schema({"question": "The open question."}, ["question"]),
    },
    CLOSE_QUESTION: {
        "name": CLOSE_QUESTION,
        "description": "Close an open question (by its key), with its answer if there is one.",
        "parameters": _schema(
            {"question_key": "The key open_question gave.", "answer": "The answer, if any."},
            ["question_key"],
        ),
    },
}


def question_key(call_id: str) -> str:
    """The key of the question an ``open_question`` call opens."""
    return f"question:{call_id}"


@dataclass(frozen=True)
class AuthoredCall:
    name: str
    text: str  # the decision, the question, or the key of the question to close
    detail: str | None  # a decision's reason, a closing's answer


def authored_of_call(name: str, arguments: str) -> AuthoredCall | None:
    """The record a tool call states; ``None`` for another tool. Raises
    ``InvalidRequest`` for arguments the processor would refuse (so the tool can say so)."""
    if name not in TOOLS:
        return None
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"{name} arguments are not JSON", field="arguments") from exc
    if not isinstance(args, dict):
        raise InvalidRequest(f"{name} arguments are not an object", field="arguments")
    field, extra, limit = {
        RECORD_DECISION: ("decision", "reason", MAX_DECISION_BYTES),
        OPEN_QUESTION: ("question", "", MAX_QUESTION_BYTES),
        CLOSE_QUESTION: ("question_key", "answer", MAX_QUESTION_BYTES),
    }[name]
    text, detail = args.get(field), args.get(extra) if extra else None
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest(f"{name} needs {field}: a non-empty string", field=field)
    if detail is not None and not isinstance(detail, str):
        raise InvalidRequest(f"{extra} is not a string", field=extra)
    for what, value in ((field, text), (extra, detail or "")):
        if len(value.encode("utf-8", "surrogatepass")) > limit:
            raise InvalidRequest(f"{what} is over {limit} bytes", field=what)
    return AuthoredCall(name, text.strip() if name == CLOSE_QUESTION else text, detail or None)


def tool_answer(name: str, arguments: str, call_id: str) -> str:
    """What the tool answers the model (the record itself is published by the adapter)."""
    try:
        call = authored_of_call(name, arguments)
    except InvalidRequest as exc:
        return f"not recorded: {exc}"
    if call is None:
        return f"unknown tool {name}"
    if name == RECORD_DECISION:
        return "Decision recorded."
    if name == OPEN_QUESTION:
        return f"Question recorded as open; its key is {question_key(call_id)}."
    return f"Question {call.text} closed."


async def publish_authored(
    c: ContextClient, run: RunHandle, calls: Iterable[tuple[str, str, str]]
) -> None:
    """Publish every decision and question tool call among ``calls`` ((call id, name,
    arguments)) as the model's record. A call whose arguments are not valid is skipped
    (logged): the tool's own answer tells the model."""
    for call_id, name, arguments in calls:
        try:
            call = authored_of_call(name, arguments)
        except InvalidRequest as exc:
            log.warning("%s call %s not published: %s", name, call_id, exc)
            continue
        if call is None:
            continue
        if name == RECORD_DECISION:
            key = f"decision:{call_id}"
            await c.record_decision(run, call.text, call.detail, key, Authority.MODEL)
        elif name == OPEN_QUESTION:
            await c.open_question(run, call.text, question_key(call_id), Authority.MODEL)
        else:
            await c.close_question(run, call.text, call.detail, authority=Authority.MODEL)
