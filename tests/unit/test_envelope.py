"""Signed envelopes (domain.context.envelope, streams.envelopes) and the ACL plan
(domain.bus_access): who may write what on the bus (issue 25)."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.auth import host_key, key_digest
from domain.bus_access import BusNames, Op, Pattern, Resource, acl_plan
from domain.context.envelope import (
    SIGNATURE_HEADER,
    SIGNER_HEADER,
    BusKey,
    Headers,
    KeySigner,
    ServiceSigner,
    VerifyKeys,
    envelope_headers,
    envelope_of,
)
from streams.envelopes import Authenticator

ISSUER = b"i" * 32  # the key issuer secret
KEY_A = host_key("a" * 16, ISSUER).key
KEY_B = host_key("b" * 16, ISSUER).key
PREPARE_KEY, COMPACTION_KEY = b"p" * 32, b"c" * 32
VERIFY = VerifyKeys({"prepare": (PREPARE_KEY,), "compaction": (COMPACTION_KEY,)}, (ISSUER,))


def verify_keys() -> VerifyKeys:
    return VERIFY


@dataclass
class Msg:
    key: bytes | None
    value: bytes | None
    headers: Headers | None


class Keys:
    def __init__(self) -> None:
        self.live = {
            "a" * 16: BusKey("space-a", "host"),
            "b" * 16: BusKey("space-b", "host"),
        }
        self.asked = 0

    async def bus_keys(self, key_ids: Sequence[str]) -> dict[str, BusKey]:
        self.asked += 1
        return {k: self.live[k] for k in key_ids if k in self.live}


def runtime(key: str) -> KeySigner:
    return KeySigner.of(key.split("_")[1], key)


def msg(signer: KeySigner | ServiceSigner | None, value: bytes = b"v", key: bytes = b"s") -> Msg:
    return Msg(key, value, signer.headers(key, value) if signer else None)


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.spec("R3.3")
async def test_a_runtime_event_is_signed_by_its_space_and_by_no_other() -> None:
    auth = Authenticator(Keys(), verify_keys)
    (signed,) = await auth.signers([msg(runtime(KEY_B))])
    assert signed is not None and signed.space_id == "space-b"
    assert signed.may_write_event("space-b")
    assert not signed.may_write_event("space-a")  # B's key cannot append to A's session
    assert not signed.may_write_control("CompactionOutcome")  # nor speak as compaction


@pytest.mark.spec("R3.3")
async def test_unsigned_forged_and_tampered_messages_have_no_signer() -> None:
    auth = Authenticator(Keys(), verify_keys)
    forged_key = KeySigner.of("a" * 16, KEY_B)  # A's id, B's secret
    tampered = msg(runtime(KEY_A))
    tampered.value = b"changed"
    moved = msg(runtime(KEY_A), key=b"s")
    moved.key = b"other-session"  # the key is signed too
    unknown = msg(KeySigner.of("c" * 16, host_key("c" * 16, ISSUER).key))
    fake_service = msg(ServiceSigner("compaction", b"x" * 32))
    found = await auth.signers([msg(None), msg(forged_key), tampered, moved, unknown, fake_service])
    assert found == [None] * 6


@pytest.mark.spec("R3.3")
async def test_control_events_come_only_from_the_service_that_makes_their_kind() -> None:
    auth = Authenticator(Keys(), verify_keys)
    compaction = ServiceSigner("compaction", COMPACTION_KEY)
    prepare = ServiceSigner("prepare", PREPARE_KEY)
    c, p = await auth.signers([msg(compaction), msg(prepare)])
    assert c is not None and c.may_write_control("CompactionOutcome")
    assert not c.may_write_control("BudgetObservation")
    assert not c.may_write_event("space-a")  # compaction writes no context event
    assert p is not None and p.may_write_control("BudgetObservation")
    assert not p.may_write_control("CompactionOutcome")
    assert p.may_write_event("space-a")  # Prepare's run lifecycle events


@pytest.mark.spec("R3.3")
async def test_a_user_key_signs_no_event() -> None:
    keys = Keys()
    keys.live["a" * 16] = BusKey("space-a", "user")
    (signed,) = await Authenticator(keys, verify_keys).signers([msg(runtime(KEY_A))])
    assert signed is not None and not signed.may_write_event("space-a")


@pytest.mark.spec("R3.3")
async def test_a_revoked_key_stops_signing_within_the_key_ttl() -> None:
    keys, clock = Keys(), Clock()
    auth = Authenticator(keys, verify_keys, ttl_s=10.0, clock=clock)
    assert (await auth.signers([msg(runtime(KEY_A))]))[0] is not None
    del keys.live["a" * 16]  # revoked
    clock.now = 9.9
    assert (await auth.signers([msg(runtime(KEY_A))]))[0] is not None  # cached
    clock.now = 10.1
    assert (await auth.signers([msg(runtime(KEY_A))]))[0] is None
    assert keys.asked == 2  # one lookup per key per TTL, not one per message


@pytest.mark.spec("R3.3")
async def test_a_tombstone_is_signed_as_the_empty_value() -> None:
    signer = runtime(KEY_A)
    m = Msg(b"s", None, signer.headers(b"s", b""))
    assert (await Authenticator(Keys(), verify_keys).signers([m]))[0] is not None


@pytest.mark.spec("R3.3")
def test_two_signers_or_a_malformed_signer_are_no_envelope() -> None:
    good = runtime(KEY_A).headers(b"s", b"v")
    assert envelope_of(good) is not None
    assert envelope_of(good + good) is None
    assert envelope_of([(SIGNER_HEADER, b"key:ZZ"), (SIGNATURE_HEADER, b"0" * 64)]) is None
    assert envelope_of([(SIGNER_HEADER, b"root:x"), (SIGNATURE_HEADER, b"0" * 64)]) is None
    assert envelope_of([(SIGNER_HEADER, b"\xff"), (SIGNATURE_HEADER, b"0" * 64)]) is None
    assert envelope_headers([("traceparent", b"x"), *good]) == good


@given(st.binary(max_size=64), st.binary(max_size=64))
def test_no_split_of_the_same_bytes_between_key_and_value_signs_alike(k: bytes, v: bytes) -> None:
    signer = runtime(KEY_A)
    whole = k + v
    if len(k) > 0:
        assert signer.headers(k, v) != signer.headers(k[:-1], whole[len(k) - 1 :])


@pytest.mark.spec("R3.3")
async def test_a_services_key_signs_as_that_service_only() -> None:
    """Prepare holds its own key and nothing it could derive the compaction service's
    from: signing as compaction with it, or with anything derived from it, fails."""
    auth = Authenticator(Keys(), verify_keys)
    as_compaction = [
        ServiceSigner("compaction", PREPARE_KEY),
        ServiceSigner("compaction", hmac.new(PREPARE_KEY, b"compaction", "sha256").digest()),
        ServiceSigner("processor", PREPARE_KEY),  # a name that signs nothing
    ]
    found = await auth.signers([msg(s) for s in as_compaction])
    assert found == [None] * 3
    (p,) = await auth.signers([msg(ServiceSigner("prepare", PREPARE_KEY))])
    assert p is not None and not p.may_write_control("CompactionOutcome")


@pytest.mark.spec("R3.3")
async def test_what_the_database_stores_signs_nothing() -> None:
    """A key's sha256 (api_keys.key_sha256), or a key not issued under the issuer
    secret, gives no secret the processor accepts."""
    auth = Authenticator(Keys(), verify_keys)
    digest = key_digest(KEY_A)
    forged = [
        KeySigner("a" * 16, bytes.fromhex(digest)),  # the scheme before issue 38
        KeySigner("a" * 16, digest.encode()),
        KeySigner.of("a" * 16, digest),
        KeySigner.of("a" * 16, host_key("a" * 16, b"x" * 32).key),  # another issuer
        KeySigner.of("a" * 16, f"alc_{'a' * 16}_{'1' * 64}"),  # a random key of that id
    ]
    assert await auth.signers([msg(f) for f in forged]) == [None] * 5


@pytest.mark.spec("R3.3")
async def test_during_a_rotation_both_secrets_verify_and_after_it_only_the_new() -> None:
    new_prepare, new_issuer = b"P" * 32, b"I" * 32
    vk = [VERIFY]
    auth = Authenticator(Keys(), lambda: vk[0])
    old_key = msg(runtime(KEY_A))
    old_service = msg(ServiceSigner("prepare", PREPARE_KEY))
    new_service = msg(ServiceSigner("prepare", new_prepare))
    new_key = msg(runtime(host_key("a" * 16, new_issuer).key))
    vk[0] = VerifyKeys(
        {"prepare": (new_prepare, PREPARE_KEY), "compaction": (COMPACTION_KEY,)},
        (new_issuer, ISSUER),
    )
    window = await auth.signers([old_key, old_service, new_service, new_key])
    assert None not in window
    vk[0] = VerifyKeys({"prepare": (new_prepare,)}, (new_issuer,))
    after = await auth.signers([old_key, old_service, new_service, new_key])
    assert [s is not None for s in after] == [False, False, True, True]


NAMES = BusNames(
    "rec", "committed", "dlq", "requests", "obs", "proc", "compaction-g", "analytics-g"
)


def _can(plan: list, user: str, op: Op, topic: str) -> bool:  # type: ignore[type-arg]
    return any(
        a.principal == f"User:{user}"
        and a.resource is Resource.TOPIC
        and a.op is op
        and (a.name == topic if a.pattern is Pattern.LITERAL else topic.startswith(a.name))
        for a in plan
    )


@pytest.mark.spec("R3.3")
def test_the_acl_plan_gives_each_principal_only_what_it_needs() -> None:
    plan = acl_plan(NAMES, ("runtime", "rt-b"))
    topics = ("rec", "committed", "dlq", "requests", "obs")
    for rt in ("runtime", "rt-b"):
        assert [t for t in topics if _can(plan, rt, Op.WRITE, t)] == ["rec"]
        assert not any(_can(plan, rt, Op.READ, t) for t in topics)
    assert [t for t in topics if _can(plan, "analytics", Op.READ, t)] == ["dlq", "obs"]
    assert not any(_can(plan, "analytics", Op.WRITE, t) for t in topics)
    writers = {u for u in ("processor", "compaction", "prepare", "analytics", "cli", "runtime")}
    assert {u for u in writers if _can(plan, u, Op.WRITE, "committed")} == {"processor"}
    assert {u for u in writers if _can(plan, u, Op.WRITE, "requests")} == {"processor"}
    assert {u for u in writers if _can(plan, u, Op.READ, "rec")} == {"processor", "cli"}
