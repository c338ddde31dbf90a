"""A prepared context's messages are written as JSON once (issue 37): the answer and the
context stored for the gateway's final check (R10.5) splice the same bytes — a long
thread's messages are most of both, and writing them twice was a sixth of a 10k-message
prepare — and both read back as the messages assembled."""

from __future__ import annotations

import orjson
import pytest

from services.prepare.assembly.prepared import PreparedEntry
from services.prepare.bodies import PrepareIn
from services.prepare.http.answer_json import AnswerResponse
from tests.unit.test_prepare_scaleout import instance_a


@pytest.mark.spec("R10.5")
async def test_the_answer_and_the_stored_context_carry_the_messages_written_once() -> None:
    a = await instance_a()
    a.say("s1", "r1", "assistant_message", 'Sunny — and a "quoted" ünïcode reply.')
    a.say("s1", "r1", "user_input", "And tomorrow?")
    prepared = await a.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    written = prepared.json_fragments()["messages"]
    assert orjson.loads(written) == prepared.messages and len(prepared.messages) >= 3

    answer = bytes(AnswerResponse(prepared).body)
    assert written in answer  # spliced, not written again
    assert orjson.loads(answer)["messages"] == prepared.messages

    await a.svc.preparer.prepared.flush()
    stored = a.prepared.rows[prepared.prepared_id].body
    assert written in stored
    assert PreparedEntry.from_json(stored).messages == prepared.messages
    # Written, the entry kept in memory for the gateway no longer holds the JSON.
    kept = await a.svc.preparer.prepared.get(prepared.prepared_id)
    assert kept is not None and kept.messages_json is None
    assert kept.messages == prepared.messages
    # A copy of the answer (the route adds its timing) keeps the written messages.
    assert prepared.model_copy().json_fragments() == {"messages": written}
