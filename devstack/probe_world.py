"""The hostile-tenant probe's world (``devstack.hostile_probe``): what it runs against,
the typed result of one probe, and two spaces provisioned the operator's way.

Space A is the victim: a host key, a release, a session with a run, a few records, a
prepared context and a model call. Space B is the attacker: its own host key, a user key,
a revoked key, its own broker principal (``streams.kafka.provision.add_runtime``) and a
session of its own. Keys are issued as ``agentloom-keys`` issues them (the ``cli``
login, the key issuer secret); everything else goes through the SDK and Prepare's API.
When the probe ends, every key is revoked and B's principal removed (``provisioned``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import asyncpg
import httpx

from domain.auth import KeyKind
from schemas.contracts import ToolStatus
from schemas.settings import Settings
from services.sdk.client import ContextClient, RunHandle
from storage.api_keys import IssuedKey, issue, revoke_key
from storage.roles import dsn_of
from streams.kafka.auth import KafkaAuth, kafka_auth
from streams.kafka.bus_secrets import issuer_secret
from streams.kafka.provision import add_runtime, remove_runtime

Surface = Literal["bus", "http", "console"]
T = TypeVar("T")
PROFILE = {
    "name": "probe-model",
    "context_capacity": 16000,
    "output_reserve": 1000,
    "safety_margin": 500,
}


@dataclass(frozen=True)
class Target:
    """The running deployment: its settings (topics, broker, database, secrets), the
    Prepare API and the console."""

    settings: Settings
    prepare_url: str
    console_url: str


@dataclass(frozen=True)
class ProbeResult:
    """One attack: what the documentation promises (``expected``), what happened
    (``observed``); ``ok`` only when they are the same."""

    name: str
    surface: Surface
    expected: str
    observed: str
    ok: bool


def verdict(name: str, surface: Surface, expected: str, observed: str) -> ProbeResult:
    return ProbeResult(name, surface, expected, observed, observed == expected)


@dataclass(frozen=True)
class Answer:
    """An HTTP answer as the probe compares it: status, error code, body text."""

    status: int
    code: str | None
    text: str

    @staticmethod
    def of(r: httpx.Response) -> Answer:
        code = None
        if r.status_code >= 400 and r.headers.get("content-type", "").startswith(
            "application/json"
        ):
            error = r.json().get("error") if isinstance(r.json(), dict) else None
            code = str(error.get("code")) if isinstance(error, dict) else None
        return Answer(r.status_code, code, r.text)


@dataclass(frozen=True)
class Victim:
    """Space A: what only A's credentials may reach (its key kept out of the repr)."""

    space: str
    key: str = field(repr=False)
    actor: str
    agent: str
    release_id: str
    run: RunHandle
    event_key: str
    record_id: str
    prepared_id: str
    call_id: str
    blob: tuple[str, int]  # sha256 and length of content stored in A's space
    client: ContextClient  # A's runtime, kept open for the read-backs


@dataclass(frozen=True)
class Attacker:
    """Space B: its credentials and its own session. No key is in the repr (nor the
    broker password: ``KafkaAuth``), so a traceback or a log line shows none."""

    space: str
    key: str = field(repr=False)
    user_key: str = field(repr=False)
    revoked_key: str = field(repr=False)
    actor: str
    release_id: str
    run: RunHandle
    kafka: KafkaAuth


@dataclass(frozen=True)
class World:
    tag: str
    # Text only hostile writes carry: found in A's view, a write got through.
    marker: str
    # Text only A's records and release carry: found in an answer to B, a read leaked.
    secret: str
    a: Victim
    b: Attacker
    target: Target

    def http(self, key: str | None, **headers: str) -> httpx.AsyncClient:
        auth = {"Authorization": f"Bearer {key}"} if key is not None else {}
        return httpx.AsyncClient(
            base_url=self.target.prepare_url, headers=auth | headers, timeout=15
        )


async def until(
    probe: Callable[[], Awaitable[T]], done: Callable[[T], bool], timeout: float = 15.0
) -> T:
    """``probe()`` again and again until ``done`` holds of its answer or ``timeout``
    passed; the last answer either way (the caller judges it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = await probe()
        if done(got) or loop.time() > deadline:
            return got
        await asyncio.sleep(0.1)


def release_body(agent: str, instructions: str, **extra: Any) -> dict[str, Any]:
    return {
        "agent_id": agent,
        "instructions": instructions,
        "tool_catalog": [{"name": "read_file", "parameters": {"type": "object"}}],
        "model_profile": PROFILE,
    } | extra


async def _keys(
    settings: Settings, space: str, tag: str, issued: list[IssuedKey]
) -> dict[str, IssuedKey]:
    """The keys of a space as ``agentloom-keys create`` makes them; ``revoked`` is
    revoked before anyone used it. Each key goes into ``issued`` as soon as it exists
    (what ``_revoke`` takes back, even when a later one fails)."""
    dsn, issuer = dsn_of(settings, "cli"), issuer_secret(settings)
    label = f"hostile probe {tag}"
    out: dict[str, IssuedKey] = {}
    for name, kind, actor in (
        ("host", KeyKind.HOST, None),
        ("user", KeyKind.USER, f"user-{tag}"),
        ("revoked", KeyKind.HOST, None),
    ):
        mint = issuer if kind is KeyKind.HOST else None
        out[name] = await issue(dsn, space, kind, actor, label, issuer=mint)
        issued.append(out[name])
    await _revoke(settings, [out["revoked"]])
    return out


async def _revoke(settings: Settings, keys: list[IssuedKey]) -> None:
    """Revoke ``keys`` the way ``agentloom-keys revoke`` does (the ``cli`` login); a key
    already revoked stays so."""
    conn = await asyncpg.connect(dsn_of(settings, "cli"))
    try:
        for k in keys:
            await revoke_key(conn, k.key_id)
    finally:
        await conn.close()


def _client(target: Target, key: str, auth: KafkaAuth) -> ContextClient:
    s = target.settings
    return ContextClient(
        s.kafka_bootstrap, target.prepare_url, topic=s.topic_records, api_key=key, kafka_auth=auth
    )


async def _victim(target: Target, c: ContextClient, key: str, tag: str, secret: str) -> Victim:
    """A's session: a question, a tool call and its result, a prepare, a model call; and
    a blob in A's content store."""
    space, actor, agent = f"probe-a-{tag}", f"alice-{tag}", f"agent-a-{tag}"
    rel = await c.register_release(**release_body(agent, f"A's instructions {secret}"))
    run = await c.start_run(await c.open_session(space, actor, rel["release_id"]))
    await c.append_user(run, f"A's private question {secret}", "a-question")
    op = [("a-c1", "read_file", '{"path": "a.txt"}')]
    await c.append_model_result(run, f"Reading {secret}.", "a-op1", op)
    await c.append_tool_outcome(run, "a-c1", "read_file", f"A's file {secret}", ToolStatus.OK)
    prepared = await c.prepare(run)
    record_id = next(i for m in prepared["messages"] for i in m.get("record_ids") or ())
    call = await c.check_model_call(run, prepared)
    put = await c.http.request("PUT", "/v1/blobs", body=f"A's blob {secret}".encode())
    blob = json.loads(put.body)
    return Victim(
        space,
        key,
        actor,
        agent,
        rel["release_id"],
        run,
        "a-question",
        record_id,
        prepared["prepared_id"],
        call["call_id"],
        (str(blob["sha256"]), int(blob["length"])),
        c,
    )


@asynccontextmanager
async def provisioned(target: Target) -> AsyncIterator[World]:
    """Two fresh spaces A and B on ``target`` (names tagged per run), A's client open
    while the world is in use. On the way out — after the probes, a failure or Ctrl-C —
    every key the world issued is revoked and B's broker principal removed with its ACLs
    and quotas (``streams.kafka.provision.remove_runtime``): a run against a live
    deployment leaves no working credential behind."""
    s, tag = target.settings, uuid.uuid4().hex[:8]
    secret, marker = f"a-secret-{tag}", f"hostile-{tag}"
    b_principal = f"probe-b-{tag}"
    async with AsyncExitStack() as stack:
        issued: list[IssuedKey] = []
        stack.push_async_callback(_revoke, s, issued)  # run last: the keys that were made
        a_keys = await _keys(s, f"probe-a-{tag}", tag, issued)
        b_keys = await _keys(s, f"probe-b-{tag}", tag, issued)
        # registered first: a principal half made by a failing add_runtime goes as well
        stack.push_async_callback(remove_runtime, s, b_principal)
        password = await add_runtime(s, b_principal)
        base = kafka_auth(s, "runtime")
        b_auth = KafkaAuth(base.protocol, base.mechanism, b_principal, password, base.cafile)
        a_client = await stack.enter_async_context(_client(target, a_keys["host"].key, base))
        victim = await _victim(target, a_client, a_keys["host"].key, tag, secret)
        async with _client(target, b_keys["host"].key, b_auth) as b:
            rel = await b.register_release(**release_body(f"agent-b-{tag}", "B's instructions"))
            actor = f"user-{tag}"  # the actor of B's user key
            b_run = await b.start_run(
                await b.open_session(b_keys["host"].space_id, actor, rel["release_id"])
            )
        attacker = Attacker(
            f"probe-b-{tag}",
            b_keys["host"].key,
            b_keys["user"].key,
            b_keys["revoked"].key,
            actor,
            rel["release_id"],
            b_run,
            b_auth,
        )
        yield World(tag, marker, secret, victim, attacker, target)
