"""Every route authenticates and authorizes (R15.4, R3.3), through the real stack.

One table names a request for every operation of the published API; each is made as
every kind of caller (the owner, the host acting as itself or for the owner, a granted
actor, another actor of the tenant space, another space, no key, bad keys) and must get
exactly its answer. A route added to the API without an entry here fails
``test_every_route_of_the_api_is_in_the_table``; one without checks fails its row.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest
import pytest_asyncio

from domain.auth import KeyKind
from services.sdk.client import ApiError, ContextClient
from storage.api_keys import revoke_key
from tests.support.flows import PROFILE, client
from tests.support.services import TEST_SPACE, Services

pytestmark = [pytest.mark.integration, pytest.mark.spec("R15.4", "R3.3")]

OTHER_SPACE = "space-2"
PUBLIC = {("get", "/healthz")}  # and /openapi.json, /docs: not operations of the API


@dataclass
class World:
    """One session in TEST_SPACE with a run, a record, a prepared context, a model call
    and a grant; and a key for every kind of caller."""

    sid: str
    owner: str
    reader: str  # granted
    run_id: str
    record_id: str
    event_key: str
    prepared_id: str
    call_id: str
    release_id: str
    callers: dict[str, dict[str, str]]  # caller -> request headers


# What each caller must get, per kind of route: 0 = allowed (no auth error), else status.
READ = {
    "owner": 0,
    "host": 0,
    "host_for_owner": 0,
    "granted": 0,
    "host_for_granted": 0,
    "other_actor": 403,
    "host_for_other_actor": 403,
    "other_space": 404,
    "other_space_same_actor": 404,
    "no_key": 401,
    "unknown_key": 401,
    "malformed_key": 401,
    "revoked_key": 401,
    "basic_auth": 401,
}
WRITE = READ | {"granted": 403, "host_for_granted": 403}
RELEASE_READ = READ | {"other_actor": 0, "host_for_other_actor": 0}
# Only a host publishes; another space publishes its own release (a new id).
RELEASE_PUBLISH = READ | {
    "owner": 403,
    "granted": 403,
    "other_actor": 403,
    "other_space_same_actor": 403,
    "other_space": 0,
    "host_for_other_actor": 0,
    "host_for_granted": 0,
}
# Opening a session for the owner: a user key only for itself; the owner's release is
# not visible from another space.
OPEN = WRITE | {"host_for_other_actor": 403}
ANY_KEY = {k: (v if v == 401 else 0) for k, v in READ.items()}
# Analytics span every actor of a space: host keys only, each its own space (issue 12).
HOST_KEY = ANY_KEY | {"owner": 403, "granted": 403, "other_actor": 403}
HOST_KEY |= {"other_space_same_actor": 403}


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    expect: dict[str, int]
    request: Callable[[World], tuple[str, dict[str, Any]]]  # url, httpx kwargs


def _run(w: World) -> str:
    return f"/v1/sessions/{w.sid}/runs/{w.run_id}"


ROUTES = [
    Route("post", "/v1/releases", RELEASE_PUBLISH, lambda w: ("/v1/releases", {"json": {
        "agent_id": "auth-test", "instructions": "x", "model_profile": PROFILE}})),
    Route("get", "/v1/releases/{release_id}", RELEASE_READ,
          lambda w: (f"/v1/releases/{w.release_id}", {})),
    Route("post", "/v1/sessions", OPEN, lambda w: ("/v1/sessions", {"json": {
        "release_id": w.release_id, "actor_id": w.owner}})),
    Route("get", "/v1/sessions/{session_id}", READ, lambda w: (f"/v1/sessions/{w.sid}", {})),
    Route("post", "/v1/sessions/{session_id}/runs", WRITE,
          lambda w: (f"/v1/sessions/{w.sid}/runs", {"json": {}})),
    Route("post", "/v1/sessions/{session_id}/runs/{run_id}/resume", WRITE,
          lambda w: (f"{_run(w)}/resume", {"json": {}})),
    Route("post", "/v1/sessions/{session_id}/runs/{run_id}/finish", WRITE,
          lambda w: (f"{_run(w)}/finish", {"json": {}})),
    Route("post", "/v1/sessions/{session_id}/runs/{run_id}/prepare", WRITE,
          lambda w: (f"{_run(w)}/prepare", {"json": {}})),
    Route("post", "/v1/sessions/{session_id}/runs/{run_id}/model-calls", WRITE,
          lambda w: (f"{_run(w)}/model-calls", {"json": {"prepared_id": w.prepared_id}})),
    Route("post", "/v1/sessions/{session_id}/model-calls/{call_id}/result", WRITE,
          lambda w: (f"/v1/sessions/{w.sid}/model-calls/{w.call_id}/result", {"json": {}})),
    Route("get", "/v1/sessions/{session_id}/records/{record_id}", READ,
          lambda w: (f"/v1/sessions/{w.sid}/records/{w.record_id}", {})),
    Route("post", "/v1/sessions/{session_id}/grants", WRITE,
          lambda w: (f"/v1/sessions/{w.sid}/grants", {"json": {"actor_id": w.reader}})),
    # Revoking a grant nobody holds: the same rights as granting, without taking the
    # reader's grant away from the other rows.
    Route("delete", "/v1/sessions/{session_id}/grants/{actor_id}", WRITE,
          lambda w: (f"/v1/sessions/{w.sid}/grants/never-granted", {})),
    Route("put", "/v1/blobs", ANY_KEY, lambda w: ("/v1/blobs", {
        "content": b"auth test blob", "headers": {"content-type": "text/plain"}})),
    Route("get", "/v1/sessions/{session_id}/events/{event_key}", READ,
          lambda w: (f"/v1/sessions/{w.sid}/events/{w.event_key}", {})),
    Route("get", "/v1/analytics/rollups", HOST_KEY, lambda w: ("/v1/analytics/rollups", {})),
    Route("get", "/v1/diagnostics/{call_or_prepared_id}", READ,
          lambda w: (f"/v1/diagnostics/{w.call_id}", {})),
]  # fmt: skip
ERROR_CODE = {401: "unauthenticated", 403: "not_granted", 404: "not_found"}


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def world(services: Services) -> AsyncIterator[World]:
    owner, reader = f"owner-{uuid.uuid4().hex[:6]}", f"reader-{uuid.uuid4().hex[:6]}"
    other = f"other-{uuid.uuid4().hex[:6]}"
    async with client(services) as c:
        rel = await c.register_release(
            agent_id="auth-test", instructions="You are careful.", model_profile=PROFILE
        )
        session = await c.open_session(TEST_SPACE, owner, rel["release_id"])
        sid = session["session_id"]
        run = await c.start_run(session)
        await c.append_user(run, "the owner's private question", "q")
        prepared = await c.prepare(run)
        record_id = prepared["messages"][-1]["record_ids"][0]
        call = await c.check_model_call(run, prepared)
        await c.grant(sid, reader, actor=owner)
    host = services.api_key
    owner_key = (await services.new_key(TEST_SPACE, KeyKind.USER, owner)).key
    reader_key = (await services.new_key(TEST_SPACE, KeyKind.USER, reader)).key
    other_key = (await services.new_key(TEST_SPACE, KeyKind.USER, other)).key
    space2 = (await services.new_key(OTHER_SPACE)).key
    space2_owner = (await services.new_key(OTHER_SPACE, KeyKind.USER, owner)).key
    revoked = await services.new_key(TEST_SPACE)
    conn = await asyncpg.connect(services.env("ALC_PG_DSN"))
    try:
        await revoke_key(conn, revoked.key_id)
    finally:
        await conn.close()
    unknown = f"alc_{uuid.uuid4().hex[:16]}_{uuid.uuid4().hex}{uuid.uuid4().hex}"
    yield World(
        sid,
        owner,
        reader,
        run.run_id,
        record_id,
        "q",
        prepared["prepared_id"],
        call["call_id"],
        rel["release_id"],
        {
            "owner": _bearer(owner_key),
            "host": _bearer(host),
            "host_for_owner": _bearer(host) | {"X-AgentLoom-Actor": owner},
            "granted": _bearer(reader_key),
            "host_for_granted": _bearer(host) | {"X-AgentLoom-Actor": reader},
            "other_actor": _bearer(other_key),
            "host_for_other_actor": _bearer(host) | {"X-AgentLoom-Actor": other},
            "other_space": _bearer(space2) | {"X-AgentLoom-Actor": owner},
            "other_space_same_actor": _bearer(space2_owner),
            "no_key": {},
            "unknown_key": _bearer(unknown),
            "malformed_key": _bearer("not-a-key"),
            "revoked_key": _bearer(revoked.key),
            "basic_auth": {"Authorization": "Basic " + host},
        },
    )


@pytest_asyncio.fixture(loop_scope="session")
async def http(services: Services) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=services.prepare_url, timeout=60) as h:
        yield h


async def test_every_route_of_the_api_is_in_the_table(http: httpx.AsyncClient) -> None:
    doc = (await http.get("/openapi.json")).json()  # public, like /healthz
    ops = {(m, p): o for p, item in doc["paths"].items() for m, o in item.items()}
    assert set(ops) == {(r.method, r.path) for r in ROUTES} | PUBLIC, (
        "a route without an authorization row: add it to ROUTES"
    )
    for key, op in ops.items():
        if key not in PUBLIC:
            assert op.get("security") == [{"HTTPBearer": []}], key
            assert {"401", "403", "404"} <= set(op["responses"]), key
    assert (await http.get("/healthz")).status_code == 200


@pytest.mark.parametrize("route", ROUTES, ids=[f"{r.method} {r.path}" for r in ROUTES])
async def test_route_answers_every_caller_as_its_rights_say(
    route: Route, world: World, http: httpx.AsyncClient
) -> None:
    wrong = []
    for caller, headers in world.callers.items():
        url, kw = route.request(world)
        kw = kw | {"headers": kw.get("headers", {}) | headers}
        r = await http.request(route.method.upper(), url, **kw)
        want = route.expect[caller]
        code = r.json().get("error", {}).get("code") if r.status_code >= 400 else None
        if want == 0:
            # Allowed: whatever the route answers, it is not a refusal (a second start or
            # finish of a run may meet run_active / run_not_active, which is its business).
            ok = r.status_code < 400 or (
                r.status_code == 409 and code in ("run_active", "run_not_active")
            )
        else:
            ok = r.status_code == want and code == ERROR_CODE[want]
            if want == 401:
                ok = ok and r.headers.get("www-authenticate") == "Bearer"
        if not ok:
            wrong.append(f"{caller}: want {want or 'allowed'}, got {r.status_code} {r.text}")
    assert not wrong, "\n".join(wrong)


async def test_a_foreign_session_answers_like_an_unknown_one(
    world: World, http: httpx.AsyncClient
) -> None:
    """404 where existence must not leak: the same answer for another space's session
    and for an id that exists nowhere."""
    h = world.callers["other_space"]
    foreign = await http.get(f"/v1/sessions/{world.sid}", headers=h)
    missing = await http.get("/v1/sessions/ses_nowhere", headers=h)
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["error"]["message"].replace(world.sid, "X") == missing.json()["error"][
        "message"
    ].replace("ses_nowhere", "X")


async def test_the_reported_attack_fails_naming_another_actor_grants_nothing(
    services: Services, world: World, http: httpx.AsyncClient
) -> None:
    """The issue's finding: X-AgentLoom-Actor set to another actor read the session and an
    outcome, started a run, granted itself access (granted_by = the owner in the body),
    then read the owner's records. A header is not an identity: each is refused now."""
    attacker = f"mallory-{uuid.uuid4().hex[:6]}"
    for headers in ({"X-AgentLoom-Actor": attacker}, world.callers["host_for_other_actor"]):
        got = [
            (await http.get(f"/v1/sessions/{world.sid}", headers=headers)).status_code,
            (await http.get(f"/v1/sessions/{world.sid}/events/q", headers=headers)).status_code,
            (
                await http.post(f"/v1/sessions/{world.sid}/runs", json={}, headers=headers)
            ).status_code,
            (
                await http.post(
                    f"/v1/sessions/{world.sid}/grants",
                    json={"actor_id": attacker, "granted_by": world.owner},
                    headers=headers,
                )
            ).status_code,
        ]
        assert got in ([401] * 4, [403] * 4), (headers, got)
    record = f"/v1/sessions/{world.sid}/records/{world.record_id}"
    assert (
        await http.get(record, headers=world.callers["host"] | {"X-AgentLoom-Actor": attacker})
    ).status_code == 403
    pool = await asyncpg.connect(services.env("ALC_PG_DSN"))
    try:
        assert not await pool.fetchval(
            "SELECT count(*) FROM session_grants WHERE session_id=$1 AND actor_id=$2",
            world.sid,
            attacker,
        )
    finally:
        await pool.close()


async def test_who_granted_is_derived_from_the_key_never_from_the_body(
    services: Services, world: World, http: httpx.AsyncClient
) -> None:
    auditor = f"auditor-{uuid.uuid4().hex[:6]}"
    r = await http.post(
        f"/v1/sessions/{world.sid}/grants",
        json={"actor_id": auditor, "granted_by": "someone-else"},
        headers=world.callers["owner"],
    )
    assert r.status_code == 201 and r.json()["granted_by"] == world.owner
    conn = await asyncpg.connect(services.env("ALC_PG_DSN"))
    try:
        row = await conn.fetchrow(
            "SELECT granted_by, granted_by_key FROM session_grants"
            " WHERE session_id=$1 AND actor_id=$2",
            world.sid,
            auditor,
        )
    finally:
        await conn.close()
    owner_key_id = world.callers["owner"]["Authorization"].split("_")[1]
    assert (row["granted_by"], row["granted_by_key"]) == (world.owner, owner_key_id)
    # The grant lets the auditor read, nothing more.
    as_auditor = world.callers["host"] | {"X-AgentLoom-Actor": auditor}
    record = f"/v1/sessions/{world.sid}/records/{world.record_id}"
    assert (await http.get(record, headers=as_auditor)).status_code == 200
    run = await http.post(f"/v1/sessions/{world.sid}/runs", json={}, headers=as_auditor)
    assert (run.status_code, run.json()["error"]["code"]) == (403, "not_granted")


async def test_a_user_key_cannot_name_another_actor(world: World, http: httpx.AsyncClient) -> None:
    h = world.callers["other_actor"] | {"X-AgentLoom-Actor": world.owner}
    r = await http.get(f"/v1/sessions/{world.sid}", headers=h)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "not_granted")


async def test_releases_are_their_spaces(
    services: Services, world: World, http: httpx.AsyncClient
) -> None:
    """A release id of another space is 'taken' (409, nothing about its content), not
    readable (404) and opens no session there (404)."""
    other = world.callers["other_space"]
    body = {
        "release_id": world.release_id,
        "agent_id": "auth-test",
        "instructions": "You are careful.",
        "model_profile": PROFILE,
    }
    taken = await http.post("/v1/releases", json=body, headers=other)
    assert (taken.status_code, taken.json()["error"]["code"]) == (409, "release_conflict")
    assert "fields" not in taken.json()["error"]["details"]
    assert (await http.post("/v1/releases", json=body, headers=world.callers["host"])).json()[
        "release_id"
    ] == world.release_id  # the owner's space: idempotent as before
    opened = await http.post(
        "/v1/sessions",
        json={"release_id": world.release_id, "actor_id": world.owner},
        headers=other,
    )
    assert (opened.status_code, opened.json()["error"]["code"]) == (404, "not_found")


async def test_sessions_open_in_the_keys_space_only(world: World, http: httpx.AsyncClient) -> None:
    host = world.callers["host"]
    r = await http.post(
        "/v1/sessions",
        json={"release_id": world.release_id, "actor_id": "x", "space_id": OTHER_SPACE},
        headers=host,
    )
    assert (r.status_code, r.json()["error"]["code"]) == (403, "not_granted")
    mine = await http.post(
        "/v1/sessions", json={"release_id": world.release_id}, headers=world.callers["owner"]
    )
    assert mine.status_code == 201
    assert (mine.json()["space_id"], mine.json()["actor_id"]) == (TEST_SPACE, world.owner)


async def test_the_sdk_sends_its_key_from_the_argument_or_the_environment(
    services: Services, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    def sdk(api_key: str | None = None) -> ContextClient:
        return ContextClient(
            services.stack.kafka_bootstrap,
            services.prepare_url,
            topic=services.env("ALC_TOPIC_RECORDS"),
            api_key=api_key,
        )

    monkeypatch.delenv("ALC_API_KEY", raising=False)
    async with sdk() as anonymous:
        with pytest.raises(ApiError) as refused:
            await anonymous._call("GET", f"/v1/sessions/{world.sid}")
        assert (refused.value.status, refused.value.code) == (401, "unauthenticated")
    monkeypatch.setenv("ALC_API_KEY", services.api_key)
    async with sdk() as from_env:
        assert (await from_env._call("GET", f"/v1/sessions/{world.sid}"))["actor_id"] == (
            world.owner
        )
    owner_key = world.callers["owner"]["Authorization"].removeprefix("Bearer ")
    async with sdk(owner_key) as as_owner:
        assert (await as_owner.read_record(world.sid, world.record_id))["content"] == (
            "the owner's private question"
        )
