"""A past call's view is what that call saw (issue 28 item 4, SPEC R18, R4.2), on the
real stack: stored when the call is recorded, the same in diagnostics, the inspector
and ``agentloom session inspect``, whatever the session does afterwards — a retraction
is only noted beside its block ("retracted since"), a later compaction changes nothing —
and every block has the role it had in the provider request that was sent."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from schemas.contracts import Authority, Content, RecordKind, RetractionPayload
from services.sdk.client import ContextClient, RunHandle
from storage.calls.views import PgCallViews
from tests.integration.test_cli import as_json, run
from tests.support.flows import client
from tests.support.services import Services
from tests.support.summarized import summarized_call

pytestmark = [pytest.mark.integration, pytest.mark.spec("R18", "R4.2")]
NOTE = "Noted: question b needs the a-rows."


async def sent_request(db: Any, call_id: str) -> dict[str, Any]:
    """The provider request the gateway answered for the call (its stored blob)."""
    text = await db.fetchval(
        "SELECT convert_from(b.content, 'UTF8') FROM model_calls m JOIN sessions s"
        " USING (session_id) JOIN blobs b ON b.space_id = s.space_id"
        " AND b.sha256 = m.final_input_sha256 WHERE m.call_id=$1",
        call_id,
    )
    return dict(json.loads(text))


def role_sent(request: dict[str, Any], starts: str) -> str:
    """The role of the one request message whose text starts with ``starts``."""
    found = [m["role"] for m in request["messages"] if str(m.get("content")).startswith(starts)]
    assert len(found) == 1, request["messages"]
    return str(found[0])


async def diagnostics(services: Services, call_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=services.prepare_url, timeout=60) as h:
        got = await h.get(
            f"/v1/diagnostics/{call_id}",
            headers={"Authorization": f"Bearer {services.api_key}"},
        )
    assert got.status_code == 200, got.text
    return dict(got.json())


async def retract(c: ContextClient, by: RunHandle, target: str, key: str) -> None:
    event = c._event(
        by, RecordKind.RECORD_RETRACTED, Authority.HOST, Content.text(""),
        RetractionPayload(target, "undo"), key, operation_id=target,
    )  # fmt: skip
    await c.append(event)


async def committed(db: Any, sid: str, key: str) -> None:
    for _ in range(600):
        if await db.fetchval(
            "SELECT 1 FROM records WHERE session_id=$1 AND event_key=$2", sid, key
        ):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{key} not committed")


async def a_call_with_a_note(c: ContextClient, db: Any) -> tuple[str, str, RunHandle]:
    runs: list[RunHandle] = []

    async def note(c: ContextClient, r: RunHandle) -> None:
        runs.append(r)
        await c.append_model_result(r, NOTE, "b-note")

    sid, call_id, _ = await summarized_call(c, db, before_call=note)
    return sid, call_id, runs[0]


def without_since(view: dict[str, Any]) -> dict[str, Any]:
    blocks = [{k: v for k, v in b.items() if k != "retracted_since"} for b in view["blocks"]]
    return view | {"blocks": blocks}


async def test_a_past_call_is_unchanged_by_a_retraction_and_a_compaction(
    services: Services, db: Any
) -> None:
    async with client(services) as c:
        sid, call_id, r = await a_call_with_a_note(c, db)
        before = await diagnostics(services, call_id)
        request = await sent_request(db, call_id)
        # What the model received: the summary as a labelled user note, and the view
        # says so (it was "system" when the view was rebuilt from the records).
        summary = before["blocks"][[b["block_id"] for b in before["blocks"]].index(
            f"summary:{before['summary_id']}")]  # fmt: skip
        assert summary["role"] == role_sent(request, "[history summary") == "user"
        sent = [b for b in before["blocks"] if b["role"] is not None]
        assert [b["role"] for b in sent] == [m["role"] for m in request["messages"]]
        assert before["rebuilt"] is False
        assert before["request_sha256"] == await db.fetchval(
            "SELECT final_input_sha256 FROM model_calls WHERE call_id=$1", call_id
        )
        noted = [b for b in before["blocks"] if b["kind"] == "assistant_message"
                 and b["decision"] == "kept" and b["sequence"] and b["record_id"]]  # fmt: skip
        note_id = await db.fetchval(
            "SELECT record_id FROM records WHERE session_id=$1 AND content_inline=$2", sid, NOTE
        )
        assert note_id in {b["record_id"] for b in noted}

        # The note is retracted and the session moves on: the past call still lists it,
        # noted as retracted since.
        await retract(c, r, note_id, "x-note")
        await committed(db, sid, "x-note")
        await c.append_user(r, "Question c?", "c-q")
        await c.check_model_call(r, await c.prepare(r))
        after = await diagnostics(services, call_id)
        assert without_since(after) == without_since(before)
        flagged = {b["block_id"] for b in after["blocks"] if b["retracted_since"]}
        assert flagged == {f"rec:{note_id}"}

        # A later compaction (a new summary over the same session) changes nothing.
        first = before["summary_id"]
        await c.finish_run(r)
        for q in ("d", "e", "f"):
            nxt = await c.start_run(
                {"session_id": sid, "space_id": r.space_id, "actor_id": r.actor_id}
            )
            await c.append_user(nxt, f"Question {q}?", f"{q}-q")
            await c.prepare(nxt)
            await c.append_model_result(nxt, f"Looking {q}.", f"{q}-m1", [(f"{q}-c", "ls", "{}")])
            await c.append_tool_outcome(nxt, f"{q}-c", "ls", f"{q} rows " * 300)
            await c.append_model_result(nxt, f"{q} done.", f"{q}-m2")
            await c.finish_run(nxt)
        for _ in range(400):
            current = await db.fetchval(
                "SELECT current_summary_id FROM compaction_state WHERE session_id=$1"
                " AND lineage='main'",
                sid,
            )
            if current and current != first:
                break
            await asyncio.sleep(0.05)
        assert current and current != first, "no second compaction"
        assert await diagnostics(services, call_id) == after


async def test_session_inspect_shows_the_stored_view_and_marks_a_rebuilt_one(
    services: Services, db: Any, pg_dsn: str
) -> None:
    async with client(services) as c:
        sid, call_id, _ = await a_call_with_a_note(c, db)
    shown = as_json(run("session", "inspect", sid, "--call", call_id, "--json", ALC_PG_DSN=pg_dsn))
    view = shown["call"]
    assert view["rebuilt"] is False
    diag = await diagnostics(services, call_id)
    assert view["blocks"] == [
        {k: v for k, v in b.items() if k != "read_back"} for b in diag["blocks"]
    ]
    request = await sent_request(db, call_id)
    roles = {b["block_id"]: b["role"] for b in view["blocks"]}
    assert roles[f"summary:{view['summary_id']}"] == role_sent(request, "[history summary")
    table = run("session", "inspect", sid, "--call", call_id, ALC_PG_DSN=pg_dsn)
    assert f"as sent: request {view['request_sha256']}" in table.stdout

    # A call recorded before views were stored (nor its prepared context kept): rebuilt.
    # Retention (services/prepare/bootstrap.py prunes after the prepared-context one).
    assert await PgCallViews(db).prune(3600) == 0
    assert await PgCallViews(db).prune(0) >= 1
    assert await db.fetchval("SELECT count(*) FROM call_views WHERE call_id=$1", call_id) == 0
    await db.execute(
        "DELETE FROM prepared_contexts WHERE prepared_id ="
        " (SELECT prepared_id FROM model_calls WHERE call_id=$1)",
        call_id,
    )
    old = as_json(run("session", "inspect", sid, "--call", call_id, "--json", ALC_PG_DSN=pg_dsn))
    assert old["call"]["rebuilt"] is True
    assert (
        "rebuilt from today's records"
        in run("session", "inspect", sid, "--call", call_id, ALC_PG_DSN=pg_dsn).stdout
    )
