"""Prepare reports every read-back on ``ctx.observability`` (SPEC R18, issue 12): the
record, the first character read and how many were returned — never the content."""

from __future__ import annotations

import asyncio

import pytest

from schemas.errors import NotGranted
from schemas.wire import decode_observability
from services.prepare.bodies import ReleaseIn, SessionIn
from services.prepare.bootstrap import Options
from storage.blobs import StoredRecord
from tests.unit.fakes.prepare import PROFILE, PrepareWorld

pytestmark = pytest.mark.spec("R18")

SECRET = "the secret body 0123456789"


async def world() -> PrepareWorld:
    w = PrepareWorld(options=Options(compaction_wait_s=5.0, topic_observability="obs"))
    body = {"release_id": "rel", "agent_id": "a", "instructions": "Answer."}
    await w.svc.releases.register(ReleaseIn.model_validate(body | {"model_profile": PROFILE}), "x")
    await w.svc.runs.open_session(SessionIn(session_id="s1", release_id="rel"), "x", "alice")
    w.run("s1", "r1")
    for rid, visibility in (("shared", "session"), ("private", "instance")):
        w.records.rows[("s1", rid)] = StoredRecord(
            rid, 1, "r1", "r1.c1", "tool_outcome", "tool", visibility, {}, None, SECRET, "res",
            False,
        )  # fmt: skip
    return w


async def test_every_read_back_is_reported_with_record_offset_and_size_never_content() -> None:
    w = await world()
    await w.svc.readback.read_record("s1", "shared", offset=4, limit=6)
    await w.svc.readback.read_record(
        "s1", "shared", offset=20, limit=100, run_id="r1", instance_id="r1.main"
    )
    await w.svc.readback.read_record("s1", "private", run_id="r1", instance_id="r1.c1")
    await asyncio.sleep(0)  # the notes are published from tasks
    sent = w.publisher.on("obs")
    notes = [decode_observability(m.value) for m in sent]
    assert [
        (n.kind, n.session_id, n.run_id, n.instance_id, n.record_id, n.read_offset, n.read_size)
        for n in notes
    ] == [
        ("readback", "s1", "", "", "shared", 4, 6),
        ("readback", "s1", "r1", "r1.main", "shared", 20, len(SECRET) - 20),
        ("readback", "s1", "r1", "r1.c1", "private", 0, len(SECRET)),
    ]
    assert {m.key for m in sent} == {b"s1"}  # keyed by session, like every other note
    assert all(SECRET[:10].encode() not in m.value for m in sent)  # never the content


async def test_a_refused_read_back_is_not_reported() -> None:
    w = await world()
    with pytest.raises(NotGranted):
        await w.svc.readback.read_record("s1", "private")  # on behalf of no thread
    await asyncio.sleep(0)
    assert w.publisher.on("obs") == []
