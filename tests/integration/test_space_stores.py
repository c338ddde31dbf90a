"""Every store is keyed by tenant space (issue 25, findings 2 and 3), through the real
stack: a record references only its own space's blobs — another space's hash is refused
exactly like a hash nobody stored — and one space's usage reports never calibrate
another space's estimates under the same model profile name."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import asyncpg
import pytest

from schemas.contracts import Authority, Content, RecordKind, UserInputPayload
from schemas.wire import decode_dead_letter
from services.sdk.client import ContextClient, RunHandle
from tests.support.flows import PROFILE, client, new_session, read_topic, wait_committed
from tests.support.services import Services

pytestmark = pytest.mark.integration

BIG = 70 * 1024  # over the SDK's inline limit: uploaded to the content store first


async def open_in(c: ContextClient, space_id: str, **release: Any) -> dict[str, Any]:
    """A session of ``space_id`` (``c`` holds a host key of that space)."""
    rel = await c.register_release(
        agent_id="space-agent",
        instructions="You are a careful test agent.",
        model_profile=release.pop("model_profile", PROFILE),
        **release,
    )
    return await c.open_session(space_id, f"actor-{uuid.uuid4().hex[:6]}", rel["release_id"])


async def reference(c: ContextClient, run: RunHandle, sha: str, length: int, key: str) -> Any:
    """Append a user input whose content is a reference to ``sha`` (no upload)."""
    content = Content.reference(sha, length, "text/plain")
    payload = UserInputPayload("question")
    event = c._event(run, RecordKind.USER_INPUT, Authority.USER, content, payload, key)
    return await c.append(event)


async def _values(services: Services, topic: str) -> list[bytes]:
    at = services.stack.kafka_bootstrap
    return [v for _, v in await read_topic(at, services.env(topic), want=10_000, timeout=5)]


async def outcome(c: ContextClient, sid: str, key: str) -> dict[str, Any]:
    return await c._call("GET", f"/v1/sessions/{sid}/events/{key}")


@pytest.mark.spec("R3.4", "R15.4")
async def test_a_record_cannot_reference_another_spaces_blob(
    services: Services, db: asyncpg.Pool
) -> None:
    secret = ("space A's secret line\n" * (BIG // 20))[:BIG]
    sha = hashlib.sha256(secret.encode()).hexdigest()
    length = len(secret.encode())
    guess = hashlib.sha256(b"nobody stored this").hexdigest()
    space_b = f"space-b-{uuid.uuid4().hex[:6]}"
    key_b = (await services.new_key(space_b)).key
    async with client(services) as a, client(services, key_b) as b:
        run_a = await a.start_run(await new_session(a))
        p, o = await a.append_user(run_a, secret, "secret")  # A uploads it, then references it
        await wait_committed(db, services, {p: o})
        session_b = await open_in(b, space_b)
        run_b = await b.start_run(session_b)
        await reference(b, run_b, sha, length, "theirs")
        p, o = await reference(b, run_b, guess, length, "guess")
        await wait_committed(db, services, {p: o})
        sid_b = session_b["session_id"]
        letters = {
            d.event_key: d
            for d in map(decode_dead_letter, await _values(services, "ALC_TOPIC_DEAD_LETTER"))
            if d.session_id == sid_b
        }
        # B's own upload of the same bytes is B's blob: referenced, it commits.
        p, o = await b.append_user(run_b, secret, "own")
        await wait_committed(db, services, {p: o})
        own = await outcome(b, sid_b, "own")
        sid_a = run_a.session_id
        mine = await outcome(a, sid_a, "secret")
        read_a = await a.read_record(sid_a, mine["record_id"], limit=2 * BIG)
        read_b = await b.read_record(sid_b, own["record_id"], limit=2 * BIG)
    theirs, guessed = letters["theirs"], letters["guess"]
    assert theirs.reason_code == guessed.reason_code == "blob_missing"
    assert theirs.reason == guessed.reason.replace(guess, sha)  # the same shape
    assert own["outcome"] == mine["outcome"] == "committed"
    assert read_a["content"] == read_b["content"] == secret  # each space reads its own
    rows = await db.fetch("SELECT space_id FROM blobs WHERE sha256=$1 ORDER BY 1", sha)
    assert sorted(r["space_id"] for r in rows) == sorted(["space-1", space_b])


@pytest.mark.spec("R6.4", "R15.4")
async def test_another_spaces_usage_does_not_calibrate_this_spaces_estimates(
    services: Services, db: asyncpg.Pool
) -> None:
    # The same free-text profile name in both spaces: this test's own.
    profile = PROFILE | {"name": f"shared-{uuid.uuid4().hex[:6]}"}
    space_b = f"space-b-{uuid.uuid4().hex[:6]}"
    key_b = (await services.new_key(space_b)).key
    async with client(services) as a, client(services, key_b) as b:
        run_b = await b.start_run(await open_in(b, space_b, model_profile=profile))
        p, o = await b.append_user(run_b, "What is the weather?", "q")
        await wait_committed(db, services, {p: o})
        prepared = await b.prepare(run_b, purpose="completion")
        call = await b.check_model_call(run_b, prepared)
        usage = {"input_tokens": 10**9}  # absurd: bounded to twice the estimate
        done = await b.report_model_result(run_b, call["call_id"], {"content": "ok"}, usage)
        assert done["drift"]["calibration"]["factor"] == 2.0
        on_b = await b.prepare(run_b, purpose="completion")
        run_a = await a.start_run(await new_session(a, model_profile=profile))
        p, o = await a.append_user(run_a, "What is the weather?", "q")
        await wait_committed(db, services, {p: o})
        on_a = await a.prepare(run_a, purpose="completion")
    assert on_b["budget"]["calibration"]["factor"] == 2.0  # B's own report moves B's
    assert "calibration" not in on_a["budget"]  # and nothing of A's
