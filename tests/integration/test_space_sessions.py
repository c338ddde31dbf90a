"""Sessions as tenant spaces see them (issue 25, finding 4), through the real stack:
session ids are per space (the API and the Agents SDK integration), and an answer about
another space's session, run or call names nothing of it — the same 404 as for an id
nobody used."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support.flows import PROFILE, client, new_session, wait_committed
from tests.support.harness import connection
from tests.support.services import TEST_SPACE, Services

pytestmark = pytest.mark.integration


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _error(r: httpx.Response) -> tuple[int, dict[str, Any]]:
    return r.status_code, r.json()["error"]


@pytest.mark.spec("R15.4", "R16")
async def test_a_404_about_another_spaces_ids_names_nothing_of_that_space(
    services: Services, db: asyncpg.Pool
) -> None:
    key_b = (await services.new_key(f"space-b-{uuid.uuid4().hex[:6]}")).key
    async with client(services) as a:
        session = await new_session(a)
        run = await a.start_run(session)
        p, o = await a.append_user(run, "What is the weather?", "q")
        await wait_committed(db, services, {p: o})
        prepared = await a.prepare(run, purpose="completion")
        call = await a.check_model_call(run, prepared)
    sid, owner = session["session_id"], session["actor_id"]
    async with httpx.AsyncClient(base_url=services.prepare_url, timeout=60) as h:
        for own_id in (call["call_id"], prepared["prepared_id"]):
            theirs = await h.get(f"/v1/diagnostics/{own_id}", headers=bearer(key_b))
            nobody = await h.get("/v1/diagnostics/mc_nobody", headers=bearer(key_b))
            (status, error), (status0, error0) = _error(theirs), _error(nobody)
            assert status == status0 == 404 and error["code"] == error0["code"] == "not_found"
            assert error["message"] == error0["message"].replace("mc_nobody", own_id)
            assert sid not in theirs.text and owner not in theirs.text
        session_routes = [
            ("GET", f"/v1/sessions/{sid}", None),
            ("POST", f"/v1/sessions/{sid}/runs", {}),
            ("POST", f"/v1/sessions/{sid}/runs/{run.run_id}/resume", {}),
            ("POST", f"/v1/sessions/{sid}/runs/{run.run_id}/finish", {}),
            ("GET", f"/v1/sessions/{sid}/events/q", None),
            ("POST", f"/v1/sessions/{sid}/runs/{run.run_id}/prepare", {"purpose": "completion"}),
            ("POST", f"/v1/sessions/{sid}/runs/{run.run_id}/model-calls", prepared),
            ("POST", f"/v1/sessions/{sid}/model-calls/{call['call_id']}/result", {}),
            ("GET", f"/v1/sessions/{sid}/records/rec_x", None),
            ("POST", f"/v1/sessions/{sid}/grants", {"actor_id": "someone"}),
            ("DELETE", f"/v1/sessions/{sid}/grants/someone", None),
        ]
        for method, path, body in session_routes:
            r = await h.request(method, path, json=body, headers=bearer(key_b))
            assert r.status_code == 404, (path, r.text)
            # It names only what the caller sent: not the owner, the space, the release.
            assert owner not in r.text and TEST_SPACE not in r.text, (path, r.text)
            assert session["release_id"] not in r.text, (path, r.text)


@pytest.mark.spec("R1.4", "R16", "R15.4")
async def test_session_ids_are_per_space(services: Services, db: asyncpg.Pool) -> None:
    """Space B opening ``conv-…`` first does not take it from A: each space has its own
    session of that id, reads and writes it by that id, and sees nothing of the other."""
    space_b = f"space-b-{uuid.uuid4().hex[:6]}"
    key_b = (await services.new_key(space_b)).key
    name = f"conv-{uuid.uuid4().hex[:8]}"
    async with client(services, key_b) as b, client(services) as a:
        rel_b = await b.register_release(agent_id="b", instructions="B.", model_profile=PROFILE)
        theirs = await b.open_session(space_b, "bob", rel_b["release_id"], name)
        rel_a = await a.register_release(agent_id="a", instructions="A.", model_profile=PROFILE)
        mine = await a.open_session(TEST_SPACE, "alice", rel_a["release_id"], name)
        again = await a.open_session(TEST_SPACE, "alice", rel_a["release_id"], name)
        assert mine["session_name"] == theirs["session_name"] == name
        assert mine["session_id"] != theirs["session_id"] and again == mine
        run_a, run_b = await a.start_run(mine), await b.start_run(theirs)
        p, o = await a.append_user(run_a, "A's question", "q")
        q, r = await b.append_user(run_b, "B's question", "q")
        await wait_committed(db, services, {p: o, q: r} if p != q else {p: max(o, r)})
        # Each space reads its own session by the id it chose.
        got_a = await a._call("GET", f"/v1/sessions/{name}")
        got_b = await b._call("GET", f"/v1/sessions/{name}")
        view_a = await a.prepare(run_a, purpose="completion")
        view_b = await b.prepare(run_b, purpose="completion")
    assert (got_a["session_id"], got_a["actor_id"]) == (mine["session_id"], "alice")
    assert (got_b["session_id"], got_b["actor_id"]) == (theirs["session_id"], "bob")
    said_a = [m["content"] for m in view_a["messages"] if m["role"] == "user"]
    said_b = [m["content"] for m in view_b["messages"] if m["role"] == "user"]
    assert said_a == ["A's question"] and said_b == ["B's question"]


@pytest.mark.spec("R16", "R15.4")
async def test_an_agents_sdk_conversation_id_is_per_space(services: Services) -> None:
    """The Agents SDK session uses the framework's conversation id: another space that
    has the same id is another conversation, and ``clear_session`` still works."""
    from services.integrations.openai_agents import AgentLoomSession

    space_b = f"space-b-{uuid.uuid4().hex[:6]}"
    key_b = (await services.new_key(space_b)).key
    conv = f"conv-{uuid.uuid4().hex[:8]}"
    release = {"agent_id": "agents", "instructions": "Help.", "model_profile": PROFILE}
    conn_b = connection(services, key_b, space_b)
    conn_a = connection(services)
    try:
        theirs = AgentLoomSession(conv, connection=conn_b, release=release)
        mine = AgentLoomSession(conv, connection=conn_a, release=release)
        await theirs.add_items([{"role": "user", "content": "B's secret"}])
        await mine.add_items([{"role": "user", "content": "A's question"}])
        assert await mine.get_items() == [{"role": "user", "content": "A's question"}]
        assert await theirs.get_items() == [{"role": "user", "content": "B's secret"}]
        await mine.clear_session()
        assert await mine.get_items() == []
        assert await theirs.get_items() == [{"role": "user", "content": "B's secret"}]
    finally:
        conn_a.close()
        conn_b.close()
