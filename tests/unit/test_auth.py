"""domain/auth.py: keys, principals and access decisions (R3.3, R15.4) — pure."""

from __future__ import annotations

import pytest

from domain.auth import (
    Action,
    Credential,
    Decision,
    KeyKind,
    Principal,
    SessionScope,
    acting,
    authorize,
    authorize_release,
    grant_to_check,
    granted_by,
    key_digest,
    key_id_of,
    session_owner,
    verify,
)
from schemas.errors import InvalidRequest, NotFound, NotGranted, Unauthenticated
from storage.api_keys import new_key

HOST = Credential("h" * 16, "acme", KeyKind.HOST)
ALICE = Credential("a" * 16, "acme", KeyKind.USER, "alice")
BOB = Credential("b" * 16, "acme", KeyKind.USER, "bob")
OTHER_HOST = Credential("o" * 16, "globex", KeyKind.HOST)
SESSION = SessionScope("ses_1", "acme", "alice")
ALL_SESSION_ACTIONS = [Action.SESSION_READ, Action.SESSION_WRITE, Action.SESSION_GRANT]

pytestmark = pytest.mark.spec("R15.4", "R3.3")


def test_a_new_key_verifies_and_only_its_digest_is_kept() -> None:
    k = new_key()
    assert key_id_of(k.key) == k.key_id
    assert k.digest == key_digest(k.key) and k.key not in k.digest
    assert verify(k.key, k.digest)
    assert not verify(k.key[:-1] + ("0" if k.key[-1] != "0" else "1"), k.digest)
    assert new_key().key != k.key


@pytest.mark.parametrize(
    "key",
    [None, "", "Bearer x", "alc_123_456", "alc_" + "g" * 16 + "_" + "0" * 64, "alc\x00"],
)
def test_malformed_keys_have_no_id_so_they_never_reach_sql(key: str | None) -> None:
    assert key_id_of(key) is None


def test_a_user_key_acts_as_its_actor_and_nobody_else() -> None:
    assert acting(ALICE, None) == Principal(ALICE, "alice")
    assert acting(ALICE, "alice") == Principal(ALICE, "alice")
    with pytest.raises(NotGranted):
        acting(ALICE, "bob")


def test_a_host_key_acts_for_the_actor_its_header_names_or_as_itself() -> None:
    assert acting(HOST, "bob") == Principal(HOST, "bob")
    assert acting(HOST, None) == Principal(HOST, None)
    assert acting(HOST, "") == Principal(HOST, None)


@pytest.mark.parametrize("action", ALL_SESSION_ACTIONS)
def test_owner_and_host_may_do_anything_in_their_space(action: Action) -> None:
    for who in (acting(ALICE, None), acting(HOST, None), acting(HOST, "alice")):
        assert authorize(who, SESSION, action).allowed
        assert grant_to_check(who, SESSION, action) is None


@pytest.mark.parametrize("action", ALL_SESSION_ACTIONS)
def test_another_space_sees_no_session_whatever_its_grants(action: Action) -> None:
    for who in (acting(OTHER_HOST, None), acting(OTHER_HOST, "alice")):
        d = authorize(who, SESSION, action, granted=True)
        assert (d.allowed, d.code, d.message) == (False, "not_found", "session ses_1 not found")
        assert grant_to_check(who, SESSION, action) is None


def test_another_actor_reads_only_with_a_grant_and_never_acts_or_grants() -> None:
    for who in (acting(BOB, None), acting(HOST, "bob")):
        assert grant_to_check(who, SESSION, Action.SESSION_READ) == "bob"
        assert not authorize(who, SESSION, Action.SESSION_READ).allowed
        assert authorize(who, SESSION, Action.SESSION_READ, granted=True).allowed
        for action in (Action.SESSION_WRITE, Action.SESSION_GRANT):
            assert grant_to_check(who, SESSION, action) is None
            d = authorize(who, SESSION, action, granted=True)
            assert (d.allowed, d.code) == (False, "not_granted")


def test_who_granted_is_derived_from_the_principal() -> None:
    assert granted_by(acting(ALICE, None), SESSION) == "alice"
    assert granted_by(acting(HOST, "alice"), SESSION) == "alice"
    assert granted_by(acting(HOST, None), SESSION) == "alice"  # the host for the owner


def test_decisions_raise_our_errors() -> None:
    Decision(True).enforce()
    with pytest.raises(NotFound):
        Decision(False, "not_found", "x").enforce()
    with pytest.raises(NotGranted):
        Decision(False, "not_granted", "x").enforce()
    with pytest.raises(Unauthenticated):
        Decision(False, "unauthenticated", "x").enforce()
    with pytest.raises(InvalidRequest):
        Decision(False, "invalid_request", "x").enforce()


def test_sessions_are_opened_in_the_keys_space_for_an_allowed_owner() -> None:
    assert session_owner(acting(HOST, None), "acme", "carol") == "carol"
    assert session_owner(acting(HOST, "carol"), None, None) == "carol"
    assert session_owner(acting(ALICE, None), None, None) == "alice"
    assert session_owner(acting(ALICE, None), "acme", "alice") == "alice"
    refused = [
        session_owner(acting(HOST, None), "globex", "carol"),  # another space
        session_owner(acting(ALICE, None), "acme", "bob"),  # a user for another actor
        session_owner(acting(HOST, "carol"), "acme", "dave"),  # header and body disagree
    ]
    assert all(isinstance(d, Decision) and d.code == "not_granted" for d in refused)
    nobody = session_owner(acting(HOST, None), None, None)
    assert isinstance(nobody, Decision) and nobody.code == "invalid_request"


def test_releases_belong_to_their_space_and_only_hosts_publish() -> None:
    host, user, other = acting(HOST, None), acting(ALICE, None), acting(OTHER_HOST, None)
    assert authorize_release(host, "r", "acme", Action.RELEASE_READ).allowed
    assert authorize_release(user, "r", "acme", Action.RELEASE_READ).allowed
    assert authorize_release(other, "r", None, Action.RELEASE_READ).allowed  # legacy, shared
    d = authorize_release(other, "r", "acme", Action.RELEASE_READ)
    assert (d.code, d.message) == ("not_found", "release r not found")
    assert authorize_release(host, "r", None, Action.RELEASE_PUBLISH).allowed
    assert authorize_release(user, "r", None, Action.RELEASE_PUBLISH).code == "not_granted"
