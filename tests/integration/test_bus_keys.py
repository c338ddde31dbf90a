"""Trust boundaries of the bus's keys on the real stack (issue 38, items 1, 2, 4): one
service's credentials cannot sign as another; nothing in the database signs an event the
processor accepts; a service's key rotates under load with nothing dead-lettered."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer

from domain.context.envelope import Headers, KeySigner, ServiceSigner, runtime_secret
from schemas.wire import (
    CompactionOutcome,
    ControlEvent,
    DeadLetter,
    decode_dead_letter,
    encode_control,
    encode_event,
)
from services.sdk.client import ContextClient, RunHandle
from storage.api_keys import PgBusKeys
from streams.envelopes import Authenticator
from streams.kafka.bus_secrets import service_signer, verify_keys
from tests.integration.test_poison import dead_letters_at
from tests.support import events as ev
from tests.support.flows import client, new_session, wait_committed
from tests.support.kafka import auth, reader
from tests.support.services import Services, settings_of, start_services
from tests.support.stack import Stack

pytestmark = pytest.mark.spec("R3.3", "R15.3")


async def _send(
    services: Services, role: str, msgs: list[tuple[bytes, bytes, Headers]]
) -> set[tuple[int, int]]:
    """Send raw messages to the records topic as ``role``'s broker principal."""
    producer = AIOKafkaProducer(
        bootstrap_servers=services.stack.kafka_bootstrap,
        **auth(role),  # type: ignore[arg-type]
    )
    await producer.start()
    try:
        topic = services.env("ALC_TOPIC_RECORDS")
        sent = set()
        for key, value, headers in msgs:
            md = await producer.send_and_wait(topic, value, key=key, headers=headers)
            sent.add((md.partition, md.offset))
        return sent
    finally:
        await producer.stop()


def _outcome(run: RunHandle) -> tuple[bytes, bytes]:
    body = CompactionOutcome(
        f"cmp_{uuid.uuid4().hex[:8]}",
        "succeeded",
        "save",
        summary_id="sum_forged",
        summary_json=json.dumps({"draft": {}, "text": "forged summary"}),
        covered_ranges=((1, 1),),
        covered_record_ids=("rec_x",),
        summary_tokens=1,
        covered_tokens=10,
    )
    control = ControlEvent(
        f"outcome:{body.job_id}", run.session_id, run.run_id, run.instance_id, 1, body
    )
    return run.session_id.encode(), encode_control(control)


async def test_prepares_credentials_cannot_get_a_compaction_outcome_accepted(
    services: Services, db: asyncpg.Pool
) -> None:
    """Prepare holds its broker login and its own signing key, read as the Prepare process
    reads it; with them it signs as itself (refused for an outcome), as compaction (wrong
    key), or as compaction with a key derived from its own (the shared-root scheme before
    issue 38): every one is dead-lettered and no summary is saved."""
    prepare = service_signer(settings_of(services.settings_env), "prepare")
    own_key = prepare.key()[0]
    derived = hashlib.sha256(own_key + b"compaction").digest()
    old_scheme = hmac.new(own_key, b"agentloom-bus-service:compaction", hashlib.sha256).digest()
    async with client(services) as a:
        run = await a.start_run(await new_session(a))
        key, value = _outcome(run)
        forged = [
            prepare.headers(key, value),
            ServiceSigner("compaction", own_key).headers(key, value),
            ServiceSigner("compaction", derived).headers(key, value),
            ServiceSigner("compaction", old_scheme).headers(key, value),
        ]
        sent = await _send(services, "prepare", [(key, value, h) for h in forged])
        p, o = await a.append_user(run, "after", "after-forged-outcome")
        await wait_committed(db, services, {p: o})
    letters = await dead_letters_at(services, sent)
    assert sorted(dl.reason_code for dl in letters.values()) == ["unauthenticated_event"] * 4
    revisions = "SELECT count(*) FROM summary_revisions WHERE session_id=$1"
    assert await db.fetchval(revisions, run.session_id) == 0


async def _dump(db: asyncpg.Pool) -> set[str]:
    """Every text value of every row of every table (bytea as its hex), as a full
    ``pg_dump`` of the data would hold them."""
    tables = await db.fetch(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema='public' AND table_type='BASE TABLE'"
    )
    values: set[str] = set()

    def walk(x: object) -> None:
        if isinstance(x, str):
            values.add(x[2:] if x.startswith("\\x") else x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for t in tables:
        for row in await db.fetch(f'SELECT row_to_json(t)::text AS j FROM "{t["table_name"]}" t'):
            walk(json.loads(row["j"]))
    return values


def _secrets_from(value: str) -> set[bytes]:
    """What a reader of ``value`` could try as a signing secret."""
    out = {value.encode(), runtime_secret(value), hashlib.sha256(value.encode()).digest()}
    with contextlib.suppress(ValueError):  # a digest as the secret: the scheme before issue 38
        out.add(bytes.fromhex(value))
    return out


async def test_a_full_database_dump_signs_no_event_the_processor_accepts(
    services: Services, db: asyncpg.Pool
) -> None:
    key = await services.new_key("space-1")
    async with client(services, api_key=key.key) as c:
        run = await c.start_run(await new_session(c))
        event = ev.user(run, "signed from a dump", "from-dump")
        mkey, value = run.session_id.encode(), encode_event(event)
        dump = await _dump(db)
        assert key.key_id in dump and key.key not in dump  # the id is stored, the key never
        candidates = {s for v in dump for s in _secrets_from(v)}
        # Every candidate, checked as the processor checks (its own verification keys and
        # key cache over this database): as the runtime's key, and as either service.
        auth = Authenticator(PgBusKeys(db), verify_keys(settings_of(services.settings_env)))
        forged = [
            signer.headers(mkey, value)
            for s in candidates
            for signer in (
                KeySigner(key.key_id, s),
                ServiceSigner("prepare", s),
                ServiceSigner("compaction", s),
            )
        ]
        msgs = [_Msg(mkey, value, h) for h in forged]
        accepted = [m for m, who in zip(msgs, await auth.signers(msgs), strict=True) if who]
        assert len(candidates) > 100 and accepted == []
        # On the real processor: the key's row signs nothing either (its sha256 as the
        # secret was the scheme before issue 38); the key itself does.
        (row,) = await db.fetch("SELECT * FROM api_keys WHERE key_id=$1", key.key_id)
        from_row = {s for v in row.values() if isinstance(v, str) for s in _secrets_from(v)}
        sent = await _send(
            services,
            "runtime",
            [(mkey, value, KeySigner(key.key_id, s).headers(mkey, value)) for s in from_row],
        )
        p, o = await c.producer.send(event)
        await wait_committed(db, services, {p: o})
    letters = await dead_letters_at(services, sent)
    assert {dl.reason_code for dl in letters.values()} == {"unauthenticated_event"}
    assert len(letters) == len(sent)
    committed = await db.fetchval(
        "SELECT count(*) FROM records WHERE session_id=$1 AND event_key='from-dump'",
        run.session_id,
    )
    assert committed == 1  # the key's own signature, sent last, is accepted


class _Msg:
    def __init__(self, key: bytes, value: bytes, headers: Headers) -> None:
        self.key, self.value, self.headers = key, value, headers


# --- rotation -------------------------------------------------------------------------

RELOAD_S = 0.2  # how often the rotating services look at their secret files


def _hex() -> str:
    return secrets.token_hex(32)


def _write(path: Path, text: str) -> None:
    """Atomically, as the runbook says (a reader never sees half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@pytest.fixture(scope="module")
def rotating(
    stack: Stack, pg_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Services, Path, dict[str, str]]]:
    """Our services with bus secrets of their own (a directory this test rotates)."""
    d = tmp_path_factory.mktemp("bus-secrets")
    keys = {"prepare": _hex(), "compaction": _hex(), "issuer": _hex()}
    _write(d / "bus-prepare.key", keys["prepare"])
    _write(d / "bus-compaction.key", keys["compaction"])
    _write(d / "key-issuer.key", keys["issuer"])
    _write(d / "bus-verify.env", f"prepare={keys['prepare']}\ncompaction={keys['compaction']}\n")
    svc = start_services(
        stack, pg_dsn, ALC_BUS_SECRETS_DIR=str(d), ALC_BUS_SECRETS_RELOAD_S=str(RELOAD_S)
    )
    try:
        yield svc, d, keys
    finally:
        svc.stop()


async def _load(
    c: ContextClient, stop: asyncio.Event, sent: list[tuple[int, int]]
) -> tuple[str, int]:
    """Runs started and finished back to back (each a Prepare-signed event that Prepare
    waits to be committed), with a runtime append in each: the session and its runs."""
    session = await new_session(c)
    n = 0
    while not stop.is_set():
        run = await c.start_run(session)
        sent.append(await c.append_user(run, f"question {n}", f"q-{n}"))
        await c.finish_run(run)
        n += 1
    return session["session_id"], n


async def _all_letters(services: Services, until: tuple[int, int]) -> list[DeadLetter]:
    """Every letter of the dead-letter topic, read until the one of ``until`` arrived."""
    consumer = reader(services.stack.kafka_bootstrap, services.env("ALC_TOPIC_DEAD_LETTER"))
    await consumer.start()
    out: list[DeadLetter] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for msgs in (await consumer.getmany(timeout_ms=300)).values():
                out += [decode_dead_letter(m.value) for m in msgs]
            if any((d.source_partition, d.source_offset) == until for d in out):
                break
    finally:
        await consumer.stop()
    return out


async def test_rotating_a_services_key_under_load_dead_letters_nothing(
    rotating: tuple[Services, Path, dict[str, str]], db: asyncpg.Pool
) -> None:
    svc, d, keys = rotating
    old, new = keys["prepare"], _hex()
    settle = RELOAD_S * 3  # every process has looked at its files since
    stop, sent = asyncio.Event(), []
    async with client(svc) as c:
        load = [asyncio.create_task(_load(c, stop, sent)) for _ in range(3)]
        await asyncio.sleep(settle)
        # 1. the processor accepts both keys; 2. Prepare signs with the new one
        _write(
            d / "bus-verify.env", f"prepare={new}\nprepare={old}\ncompaction={keys['compaction']}\n"
        )
        await asyncio.sleep(settle)
        _write(d / "bus-prepare.key", new)
        await asyncio.sleep(settle)
        # 3. once everything signed with the old key is consumed, the window closes
        await wait_committed(db, svc, _latest(sent))
        _write(d / "bus-verify.env", f"prepare={new}\ncompaction={keys['compaction']}\n")
        await asyncio.sleep(settle)
        stop.set()
        runs = dict(await asyncio.gather(*load))
        await wait_committed(db, svc, _latest(sent))
    # The old key is refused now, the new one accepted: the rotation did happen.
    async with client(svc) as c:
        run = await c.start_run(await new_session(c))
        late = ev.user(run, "old key", "signed-with-the-old-key")
        mkey, value = run.session_id.encode(), encode_event(late)
        (probe,) = await _send(svc, "prepare", [(mkey, value, _as("prepare", old, mkey, value))])
    letters = await _all_letters(svc, probe)
    assert [(dl.source_partition, dl.source_offset, dl.reason_code) for dl in letters] == [
        (*probe, "unauthenticated_event")
    ]
    # Every run of the load, before, during and after the window, was applied.
    rows = await db.fetch(
        "SELECT session_id, count(*) FILTER (WHERE kind='run_finished') AS finished,"
        " count(*) FILTER (WHERE kind='user_input') AS questions"
        " FROM records WHERE session_id = ANY($1) GROUP BY session_id",
        list(runs),
    )
    assert {r["session_id"]: (r["finished"], r["questions"]) for r in rows} == {
        sid: (n, n) for sid, n in runs.items()
    }
    assert sum(runs.values()) >= 6


def _as(service: str, key: str, mkey: bytes, value: bytes) -> Headers:
    return ServiceSigner(service, key.encode()).headers(mkey, value)


def _latest(sent: list[tuple[int, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for p, o in sent:
        out[p] = max(out.get(p, -1), o)
    return out
