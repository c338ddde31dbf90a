"""The SDK's decision and question appends and the adapters' publishing of the model's
tool calls (issue 36), over a fake bus: the events they build pass the processor's
validation, carry their kind, payload and key, and a closing's default key stays within
the key limit."""

from __future__ import annotations

import json
from typing import Any

from schemas.contracts import (
    Authority,
    ContextEvent,
    DecisionPayload,
    QuestionPayload,
    RecordKind,
)
from schemas.limits import MAX_KEY_LEN
from schemas.validation import validate_event
from services.integrations.authored_tools import publish_authored
from services.sdk.appends import RunHandle
from services.sdk.authored import AuthoredAppends
from services.sdk.key_check import BusKeyCheck

RUN = RunHandle("sess-1", "run-1", "run-1.main", "space-1", "actor-1", {})


class FakeBus:
    def __init__(self) -> None:
        self.sent: list[ContextEvent] = []

    async def send(self, event: ContextEvent) -> tuple[int, int]:
        self.sent.append(event)
        return 0, len(self.sent) - 1


async def _committed(
    session_id: str, event_key: str, partition: int, offset: int
) -> dict[str, Any]:
    return {"outcome": "committed"}


class Client(AuthoredAppends):
    def __init__(self) -> None:
        self.producer = FakeBus()  # type: ignore[assignment]
        self.producer_name, self.host_id = "runtime", "host-1"
        self.key_check = BusKeyCheck(_committed)

    @property
    def sent(self) -> list[ContextEvent]:
        return self.producer.sent  # type: ignore[attr-defined, no-any-return]


async def test_the_appends_build_valid_events_with_their_keys() -> None:
    c = Client()
    await c.record_decision(RUN, "Use Avro.", reason="typed", event_key="d1")
    await c.open_question(RUN, "Which port?", event_key="q1", authority=Authority.USER)
    await c.close_question(RUN, "q1", answer="9093")
    await c.close_question(RUN, "q" * MAX_KEY_LEN)
    for ev in c.sent:
        validate_event(ev)
    first, opened, closed, long_closed = c.sent
    assert (first.kind, first.event_key, first.payload) == (
        RecordKind.DECISION_RECORDED,
        "d1",
        DecisionPayload("typed"),
    )
    assert first.content.inline == "Use Avro." and first.authority is Authority.HOST
    assert (opened.kind, opened.payload, opened.authority) == (
        RecordKind.QUESTION_OPENED,
        QuestionPayload("q1"),
        Authority.USER,
    )
    assert (closed.kind, closed.event_key, closed.payload) == (
        RecordKind.QUESTION_CLOSED,
        "close:q1",
        QuestionPayload("q1", "9093"),
    )
    assert len(long_closed.event_key) <= MAX_KEY_LEN


async def test_the_models_tool_calls_are_published_as_its_records() -> None:
    c = Client()
    calls = [
        ("c1", "record_decision", json.dumps({"decision": "Use Avro.", "reason": "typed"})),
        ("c2", "open_question", json.dumps({"question": "Which port?"})),
        ("c3", "close_question", json.dumps({"question_key": "question:c2", "answer": "9093"})),
        ("c4", "read_file", "{}"),  # another tool
        ("c5", "record_decision", "{}"),  # not a decision: skipped (the tool told the model)
    ]
    await publish_authored(c, RUN, calls)  # type: ignore[arg-type]
    got: list[tuple[Any, ...]] = [(e.kind, e.event_key, e.authority) for e in c.sent]
    assert got == [
        (RecordKind.DECISION_RECORDED, "decision:c1", Authority.MODEL),
        (RecordKind.QUESTION_OPENED, "question:c2", Authority.MODEL),
        (RecordKind.QUESTION_CLOSED, "close:question:c2", Authority.MODEL),
    ]
    for ev in c.sent:
        validate_event(ev)
