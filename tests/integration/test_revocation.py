"""Revoking a grant or a key is honoured by every Prepare instance within the key cache's
TTL (issue 25, finding 5: Prepare answered 200 after the grant was gone, until it
restarted). Two Prepare processes over one database, as tests/integration/
test_prepare_scaleout.py starts them; the grant is revoked through one of them."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
import httpx
import pytest

from devstack.launcher import Proc
from domain.auth import KeyKind
from services.prepare.bootstrap import Options
from storage.api_keys import revoke_key
from tests.support.flows import client, new_session
from tests.support.harness import second_prepare
from tests.support.services import TEST_SPACE, Services, start_services
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

TTL = Options().key_cache_s  # the key cache's, which grants now share
SLACK = 5.0  # a loaded 2-core machine: answers may take seconds


@dataclass
class Two:
    a: Services  # the whole stack, with Prepare instance A
    b: Proc
    b_url: str


@pytest.fixture(scope="module")
def two(stack: Stack, pg_dsn: str) -> Iterator[Two]:
    a = start_services(stack, pg_dsn)
    try:
        with second_prepare(a) as (b, url):
            yield Two(a, b, url)
    finally:
        a.stop()


@dataclass
class Scene:
    sid: str
    owner: str
    reader: str
    owner_key: str
    reader_key: str
    on_a: httpx.AsyncClient
    on_b: httpx.AsyncClient


@asynccontextmanager
async def _scene(two: Two) -> AsyncIterator[Scene]:
    async with client(two.a) as c:
        session = await new_session(c)
    owner, reader = session["actor_id"], f"reader-{uuid.uuid4().hex[:6]}"
    owner_key = (await two.a.new_key(TEST_SPACE, KeyKind.USER, owner)).key
    reader_key = (await two.a.new_key(TEST_SPACE, KeyKind.USER, reader)).key
    async with (
        httpx.AsyncClient(base_url=two.a.prepare_url, timeout=60) as on_a,
        httpx.AsyncClient(base_url=two.b_url, timeout=60) as on_b,
    ):
        yield Scene(session["session_id"], owner, reader, owner_key, reader_key, on_a, on_b)


@pytest.fixture(name="s")
async def scene(two: Two) -> AsyncIterator[Scene]:
    async with _scene(two) as s:
        yield s


def _as(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _status(http: httpx.AsyncClient, sid: str, key: str) -> int:
    return (await http.get(f"/v1/sessions/{sid}", headers=_as(key))).status_code


async def _refused_within(http: httpx.AsyncClient, sid: str, key: str, want: int) -> float:
    """Seconds until ``http`` answers ``want`` for the key's read (polled)."""
    t0 = time.monotonic()
    while (got := await _status(http, sid, key)) != want:
        assert got == 200, got
        assert time.monotonic() - t0 < TTL + SLACK, f"still {got} after {TTL + SLACK} s"
        await asyncio.sleep(0.25)
    return time.monotonic() - t0


async def _grant_revoked_on_a_stops_the_reader_on_b(s: Scene) -> None:
    grant = await s.on_a.post(
        f"/v1/sessions/{s.sid}/grants", json={"actor_id": s.reader}, headers=_as(s.owner_key)
    )
    assert grant.status_code == 201
    # Both instances found the grant and cache it.
    assert await _status(s.on_a, s.sid, s.reader_key) == 200
    assert await _status(s.on_b, s.sid, s.reader_key) == 200
    gone = await s.on_a.delete(f"/v1/sessions/{s.sid}/grants/{s.reader}", headers=_as(s.owner_key))
    assert gone.status_code == 200 and gone.json()["revoked"] is True
    assert await _status(s.on_a, s.sid, s.reader_key) == 403  # the revoking one: at once
    await _refused_within(s.on_b, s.sid, s.reader_key, 403)  # the other: within the TTL
    # Revoked twice: nothing left to revoke, the same 200.
    again = await s.on_b.delete(f"/v1/sessions/{s.sid}/grants/{s.reader}", headers=_as(s.owner_key))
    assert again.status_code == 200 and again.json()["revoked"] is False


async def _key_revoked_stops_on_both_instances(two: Two, s: Scene) -> None:
    assert await _status(s.on_a, s.sid, s.owner_key) == 200
    assert await _status(s.on_b, s.sid, s.owner_key) == 200  # cached on both
    conn = await asyncpg.connect(two.a.env("ALC_PG_DSN"))
    try:
        assert await revoke_key(conn, s.owner_key.split("_")[1])
    finally:
        await conn.close()
    waited = await asyncio.gather(
        *(_refused_within(http, s.sid, s.owner_key, 401) for http in (s.on_a, s.on_b))
    )
    assert max(waited) < TTL + SLACK


@pytest.mark.spec("R3.3", "R15.4")
async def test_a_revoked_grant_or_key_stops_on_both_instances_within_the_ttl(
    two: Two, s: Scene
) -> None:
    """A grant revoked on A stops its reader on B, and a key revoked in the database
    stops on A and on B, each within the cache's TTL: the two waits run side by side
    (each on its own session and keys), so the test waits one TTL, not two."""
    async with _scene(two) as other:
        await asyncio.gather(
            _grant_revoked_on_a_stops_the_reader_on_b(s),
            _key_revoked_stops_on_both_instances(two, other),
        )


@pytest.mark.spec("R3.3", "R15.4")
async def test_only_the_owner_or_the_host_revokes_and_the_revocation_is_audited(
    two: Two, s: Scene
) -> None:
    await s.on_a.post(
        f"/v1/sessions/{s.sid}/grants", json={"actor_id": s.reader}, headers=_as(s.owner_key)
    )
    path = f"/v1/sessions/{s.sid}/grants/{s.reader}"
    other_space = (await two.a.new_key("space-elsewhere")).key
    for key, want in ((s.reader_key, 403), (other_space, 404)):
        r = await s.on_b.delete(path, headers=_as(key))
        assert r.status_code == want, r.text
    assert await _status(s.on_b, s.sid, s.reader_key) == 200  # still granted
    host = await s.on_b.delete(path, headers=_as(two.a.api_key))  # the runtime itself
    assert host.status_code == 200 and host.json()["revoked_by"] == s.owner
    conn = await asyncpg.connect(two.a.env("ALC_PG_DSN"))
    try:
        row = await conn.fetchrow(
            "SELECT granted_by, revoked_by, revoked_by_key FROM session_grant_revocations"
            " WHERE session_id=$1 AND actor_id=$2",
            s.sid,
            s.reader,
        )
        live = await conn.fetchval(
            "SELECT count(*) FROM session_grants WHERE session_id=$1 AND actor_id=$2",
            s.sid,
            s.reader,
        )
    finally:
        await conn.close()
    assert (row["granted_by"], row["revoked_by"], live) == (s.owner, s.owner, 0)
    assert row["revoked_by_key"] == two.a.api_key.split("_")[1]
