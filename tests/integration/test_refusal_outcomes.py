"""Issue 38 (items 5 and 6) on the real stack: every refusal of a runtime's append is the
append's outcome (``GET /v1/sessions/{s}/events/{key}`` answers it with its code, never
``unknown`` for ever), a message keyed otherwise than its session is dead-lettered
``key_mismatch``, and a client whose appends the bus refuses (a user key) raises
``bus_key_refused`` instead of preparing from a view without them."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from domain.auth import KeyKind
from schemas.contracts import Content
from schemas.errors import ApiError
from schemas.wire import encode_event
from tests.integration.test_poison import dead_letters_at
from tests.support import events as ev
from tests.support.flows import PROFILE, client, new_session, wait_committed
from tests.support.kafka import signed
from tests.support.services import TEST_SPACE, Services

pytestmark = pytest.mark.integration


async def outcome(
    services: Services, api_key: str, sid: str, key: str, at: tuple[int, int] | None = None
) -> dict[str, Any]:
    params = {} if at is None else {"partition": at[0], "offset": at[1]}
    async with httpx.AsyncClient(
        base_url=services.prepare_url, headers={"Authorization": f"Bearer {api_key}"}
    ) as http:
        r = await http.get(f"/v1/sessions/{sid}/events/{key}", params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.mark.spec("R3.3", "R15.3", "R16")
async def test_a_refused_append_answers_its_code_and_a_misplaced_key_is_refused(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        run = await c.start_run(await new_session(c))
        sid = run.session_id
        # Refused at admission: its content was never stored (R3.4).
        dangling = dataclasses.replace(
            ev.user(run, "large", "dangling"), content=Content.reference("f" * 64, 9, "text/plain")
        )
        refs = [await c.append(dangling)]
        # Signed by the space's own runtime, keyed by another session: another partition
        # than the session's, so another writer than its single one.
        value = encode_event(ev.user(run, "misplaced", "misplaced"))
        key = f"other-{uuid.uuid4().hex[:6]}".encode()
        md = await c.producer._producer.send_and_wait(
            services.env("ALC_TOPIC_RECORDS"),
            value,
            key=key,
            headers=signed(services.api_key, key, value),
        )
        refs.append((md.partition, md.offset))
        refs.append(await c.append_user(run, "still flowing", "after"))
        await wait_committed(db, services, {p: o for p, o in refs})
        # The host key's first append was refused for a reason of its own: its signature
        # was accepted, so the SDK asks nothing more (services/sdk/key_check.py).
        await c.prepare(run)
        assert c.key_check.verified and c.key_check.unchecked is None
    letters = await dead_letters_at(services, set(refs[:2]))
    assert [(letters[r].reason_code, letters[r].space_id) for r in refs[:2]] == [
        ("blob_missing", TEST_SPACE),
        ("key_mismatch", TEST_SPACE),
    ]
    assert letters[refs[1]].session_id == sid  # its own session: named, and told
    for k, code in (("dangling", "blob_missing"), ("misplaced", "key_mismatch")):
        got = await outcome(services, services.api_key, sid, k)
        assert (got["outcome"], got["code"]) == ("dead_letter", code)
    assert (await outcome(services, services.api_key, sid, "after"))["outcome"] == "committed"
    rows = await db.fetch("SELECT event_key FROM records WHERE session_id=$1", sid)
    keys = {r["event_key"] for r in rows}
    assert "after" in keys and not {"dangling", "misplaced"} & keys


@pytest.mark.spec("R15.4", "R16")
async def test_a_user_keys_append_makes_the_sdk_raise_bus_key_refused(
    services: Services, db: asyncpg.Pool
) -> None:
    actor = f"user-{uuid.uuid4().hex[:6]}"
    user_key = await services.new_key(TEST_SPACE, KeyKind.USER, actor_id=actor)
    async with client(services) as host:
        release = (await host.register_release(**_release()))["release_id"]
    async with client(services, user_key.key) as u:
        # The user key may open its own session, start a run and prepare over HTTP ...
        session = await u.open_session(TEST_SPACE, actor, release)
        run = await u.start_run(session)
        at = await u.append_user(run, "a question the bus will not take", "q1")
        # ... but its appends are not the runtime's: the prepare says so, never answers
        # from a view without them.
        with pytest.raises(ApiError) as refused:
            await u.prepare(run)
        assert refused.value.code == "bus_key_refused"
        with pytest.raises(ApiError) as again:  # and every append after it
            await u.append_user(run, "another", "q2")
        assert again.value.code == "bus_key_refused"
    assert not await db.fetchval(
        "SELECT 1 FROM records WHERE session_id=$1 AND event_key='q1'", run.session_id
    )
    # The route tells a refused append from a slow one once the processor passed it.
    passed = await outcome(services, user_key.key, run.session_id, "q1", at)
    assert (passed["outcome"], passed["code"]) == ("dead_letter", "not_applied")
    assert (await outcome(services, user_key.key, run.session_id, "q1"))["outcome"] == "unknown"


def _release() -> dict[str, Any]:
    return {
        "agent_id": "user-key-agent",
        "instructions": "Be brief.",
        "tool_catalog": [],
        "model_profile": PROFILE,
    }
