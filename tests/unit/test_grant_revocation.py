"""Grants can be revoked (issue 25, finding 5), and revoking a grant or a key is honoured
by every Prepare instance within the key cache's TTL — two instances over the same
stores, one clock (fakes; the real-stack twin is tests/integration/test_revocation.py)."""

from __future__ import annotations

import pytest

from domain.auth import Action, KeyKind, Principal
from schemas.errors import NotFound, NotGranted, Unauthenticated
from services.prepare.bodies import ReleaseIn, SessionIn
from tests.unit.fakes.prepare import PROFILE, PrepareWorld

READ = Action.SESSION_READ


async def world() -> PrepareWorld:
    w = PrepareWorld()
    body = {
        "release_id": "rel",
        "agent_id": "a",
        "instructions": "Answer.",
        "model_profile": PROFILE,
    }
    await w.svc.releases.register(ReleaseIn.model_validate(body), "space")
    await w.svc.runs.open_session(SessionIn(session_id="s1", release_id="rel"), "space", "alice")
    return w


async def who(w: PrepareWorld, kind: KeyKind, actor: str | None, space: str = "space") -> Principal:
    key = w.keys.issue(space, kind, actor if kind is KeyKind.USER else None)
    return await w.svc.access.authenticate(key, actor if kind is KeyKind.HOST else None)


async def reads(w: PrepareWorld, p: Principal) -> bool:
    try:
        await w.svc.access.authorize("s1", p, READ)
    except NotGranted:
        return False
    return True


@pytest.mark.spec("R3.3", "R15.4")
async def test_a_revoked_grant_stops_on_this_instance_at_once_and_on_another_within_the_ttl() -> (
    None
):
    a = await world()
    b = a.instance()
    owner = await who(a, KeyKind.USER, "alice")
    bob = await who(a, KeyKind.USER, "bob")
    await a.svc.readback.grant("s1", owner, "bob")
    assert await reads(a, bob) and await reads(b, bob)  # B caches the grant it found
    out = await a.svc.readback.revoke("s1", owner, "bob")
    assert (out.revoked, out.revoked_by) == (True, "alice")
    assert not await reads(a, bob)  # the answering instance: at once
    ttl = b.options.key_cache_s
    a.clock[0] += ttl - 1
    assert await reads(b, bob)  # within the TTL, B may still answer from its cache...
    a.clock[0] += 2
    assert not await reads(b, bob)  # ...never past it (was: cached for the process's life)
    # Idempotent: revoking again says there was nothing; granting again works at once.
    assert (await b.svc.readback.revoke("s1", owner, "bob")).revoked is False
    await b.svc.readback.grant("s1", owner, "bob")
    assert await reads(a, bob) and await reads(b, bob)


@pytest.mark.spec("R3.3", "R15.4")
async def test_only_who_may_grant_may_revoke_and_a_refusal_tells_nothing() -> None:
    w = await world()
    owner = await who(w, KeyKind.USER, "alice")
    await w.svc.readback.grant("s1", owner, "bob")
    bob = await who(w, KeyKind.USER, "bob")
    carol = await who(w, KeyKind.USER, "carol")
    host_for_carol = await who(w, KeyKind.HOST, "carol")
    stranger = await who(w, KeyKind.HOST, None, space="elsewhere")
    for p in (bob, carol, host_for_carol):
        for actor in ("bob", "nobody"):  # the same answer, whether a grant exists or not
            with pytest.raises(NotGranted):
                await w.svc.readback.revoke("s1", p, actor)
    for actor in ("bob", "nobody"):
        with pytest.raises(NotFound):  # another space: as an unknown session
            await w.svc.readback.revoke("s1", stranger, actor)
    assert ("s1", "bob") in w.sessions.grants
    host = await who(w, KeyKind.HOST, None)
    out = await w.svc.readback.revoke("s1", host, "bob")  # the runtime, acting as itself
    assert (out.revoked, out.revoked_by) == (True, "alice")
    assert not await reads(w, bob)


@pytest.mark.spec("R15.4")
async def test_a_revoked_key_stops_on_every_instance_within_the_ttl() -> None:
    a = await world()
    b = a.instance()
    key = a.keys.issue("space", KeyKind.USER, "alice")
    await a.svc.access.authenticate(key, None)
    await b.svc.access.authenticate(key, None)
    key_id = key.split("_")[1]
    del a.keys.rows[key_id]  # revoked in the shared store
    a.clock[0] += a.options.key_cache_s + 1
    for instance in (a, b):
        with pytest.raises(Unauthenticated):
            await instance.svc.access.authenticate(key, None)
