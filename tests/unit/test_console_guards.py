"""The console's pure guards (issue 25, finding 9): the sealed key, the tokens, the
Origin decision and the id rule — no server, no database."""

from __future__ import annotations

import pytest

from services.console import sealing
from services.console.fields import id_problem
from services.console.guards import refusal


def _scope(method: str, **headers: str) -> dict[str, object]:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return {"type": "http", "method": method, "scheme": "http", "headers": raw}


def test_a_sealed_key_opens_only_with_its_session_id() -> None:
    sid = sealing.new_id()
    sealed = sealing.seal(sid, "alc_0123456789abcdef_secret")
    assert b"secret" not in sealed
    assert sealing.unseal(sid, sealed) == "alc_0123456789abcdef_secret"
    assert sealing.unseal(sealing.new_id(), sealed) is None
    tampered = bytes([sealed[0] ^ 1]) + sealed[1:]
    assert sealing.unseal(sid, tampered) is None
    assert sealing.unseal(sid, b"") is None


def test_tokens_are_bound_to_their_session_and_to_the_secret() -> None:
    a, b = sealing.new_id(), sealing.new_id()
    assert sealing.csrf_token(a) != sealing.csrf_token(b)
    assert sealing.same(sealing.csrf_token(a), sealing.csrf_token(a))
    assert not sealing.same(None, sealing.csrf_token(a))
    assert sealing.login_token(b"s1", a) != sealing.login_token(b"s2", a)
    assert sealing.id_hash(a) != a.encode()


@pytest.mark.spec("R16")
@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        ({"host": "c:1", "origin": "http://c:1"}, False),
        ({"host": "c:1"}, False),  # no browser form post; the token still applies
        ({"host": "c:1", "origin": "http://evil.example"}, True),
        ({"host": "c:1", "origin": "http://c:2"}, True),  # same site, another port
        ({"host": "c:1", "origin": "https://c:1"}, True),
        ({"host": "c:1", "origin": "null"}, True),
        ({"host": "c:1", "referer": "http://c:1/settings"}, False),
        ({"host": "c:1", "referer": "http://sub.c:1/x"}, True),
        ({"host": "c:1", "referer": "not a url"}, True),
    ],
)
def test_an_unsafe_request_from_another_origin_is_refused(
    headers: dict[str, str], refused: bool
) -> None:
    err = refusal(_scope("POST", **headers), ())
    assert (err is not None) is refused
    if err is not None:
        assert err.code == "origin_refused" and err.http_status == 403
    assert refusal(_scope("GET", **headers), ()) is None


def test_configured_origins_replace_the_requests_own() -> None:
    scope = _scope("POST", host="10.0.0.5:18090", origin="https://console.example")
    assert refusal(scope, ("https://console.example",)) is None
    assert refusal(scope, ()) is not None


@pytest.mark.parametrize("value", ["../x", "..", ".", "a/b", "a\\b", "a\x00b", "x" * 200])
def test_an_id_is_one_path_segment(value: str) -> None:
    assert id_problem(value) is not None


def test_ordinary_ids_and_empty_pass() -> None:
    assert id_problem("rel_0123abcd") is None
    assert id_problem("sess-1.2:a") is None
    assert id_problem("") is None


def test_only_an_id_of_our_shape_is_kept_as_a_pre_session() -> None:
    assert sealing.is_id(sealing.new_id())
    assert not sealing.is_id("attacker-chosen")
    assert not sealing.is_id("a" * 42 + "!")
