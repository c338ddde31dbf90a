"""The hostile-tenant probe (``devstack.hostile_probe``) can fail: each judge, given what
a leaky deployment would answer, reports the probe not ok — and the HTTP and console
probes, run against a fake Prepare or console that leaks A's session to B, say so; the
same fakes answering as docs/security.md promises pass."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, cast

import httpx
import pytest

from devstack.probe_bus import counted, describe
from devstack.probe_console import LIKE_UNKNOWN as PAGE_LIKE_UNKNOWN
from devstack.probe_console import page_probe
from devstack.probe_http import LIKE_UNKNOWN, ROUTES, like_unknown, route_probe
from devstack.probe_world import Answer, Attacker, Target, Victim, World, verdict
from domain.auth import KeyKind
from schemas.settings import Settings
from schemas.wire import DeadLetter
from services.sdk.client import ContextClient, RunHandle
from storage.api_keys import IssuedKey
from streams.kafka.auth import KafkaAuth
from streams.kafka.provision import remove_runtime

pytestmark = pytest.mark.spec("R3.3", "R15.4")


def _world(password: str | None = None) -> World:
    a_run = RunHandle("ses_a", "run_a", "inst_a", "probe-a-t", "alice-t", {})
    b_run = RunHandle("ses_b", "run_b", "inst_b", "probe-b-t", "user-t", {})
    a = Victim(
        "probe-a-t", "key-a", "alice-t", "agent-a-t", "rel_a", a_run, "a-question", "rec_a",
        "prep_a", "call_a", ("f" * 64, 9), cast(ContextClient, None),
    )  # fmt: skip
    b = Attacker(
        "probe-b-t", "key-b", "user-b", "revoked-b", "user-t", "rel_b", b_run,
        KafkaAuth("SASL_PLAINTEXT", "SCRAM-SHA-512", "probe-b-t", password),
    )  # fmt: skip
    target = Target(Settings(), "http://prepare", "http://console")
    return World("t", "hostile-t", "a-secret-t", a, b, target)


def _not_found(what: str) -> httpx.Response:
    body = {"error": {"code": "not_found", "message": f"{what} not found"}}
    return httpx.Response(404, json=body)


def test_a_wrong_observation_is_not_ok() -> None:
    assert verdict("x", "bus", "refused", "refused").ok
    assert not verdict("x", "bus", "refused", "written").ok


def test_an_answer_that_tells_a_from_an_unknown_id_is_a_finding() -> None:
    ids, nowhere = {"sid": "ses_a"}, {"sid": "x123"}
    unknown = Answer(404, "not_found", '{"message": "session x123 not found"}')
    same = Answer(404, "not_found", '{"message": "session ses_a not found"}')
    assert like_unknown(same, unknown, ids, nowhere, ["a-secret"]) == LIKE_UNKNOWN
    leaks = [
        Answer(200, None, '{"session_id": "ses_a"}'),  # served to B
        Answer(403, "not_granted", "{}"),  # "it exists, but not for you"
        Answer(404, "not_found", '{"message": "session ses_a of space a not found"}'),
    ]
    for leak in leaks:
        assert like_unknown(leak, unknown, ids, nowhere, ["a-secret"]) != LIKE_UNKNOWN, leak


def test_a_letter_counted_in_the_victims_space_or_a_count_of_a_is_a_finding() -> None:
    w = _world()
    letter = DeadLetter("scope_mismatch", "r", "ctx.records", 0, 1, None, None, None, None, 0)
    expected = f"dead letter scope_mismatch, space {w.b.space}"
    assert describe(dataclasses.replace(letter, space_id=w.b.space)) == expected
    assert describe(dataclasses.replace(letter, space_id=w.a.space)) != expected
    assert describe(None) != expected
    rows: list[dict[str, object]] = [
        {"metric": "dead_letters", "label": "scope_mismatch", "value": 1},
        {"metric": "prepares", "label": "", "value": 3},
    ]
    assert counted(rows) == {("dead_letters", "scope_mismatch")}


def _prepare(leaky: bool) -> httpx.MockTransport:
    """A fake Prepare: every id unknown, but A's session served to B when ``leaky``."""

    def handle(request: httpx.Request) -> httpx.Response:
        if leaky and "ses_a" in request.url.path:
            return httpx.Response(200, json={"session_id": "ses_a", "space_id": "probe-a-t"})
        return _not_found(f"session {request.url.path.split('/')[3]}")

    return httpx.MockTransport(handle)


@pytest.mark.parametrize("leaky", [False, True])
async def test_the_http_probe_finds_a_leaky_prepare(leaky: bool) -> None:
    route = next(r for r in ROUTES if r.name == "http.get_session")
    transport = _prepare(leaky)
    async with httpx.AsyncClient(transport=transport, base_url="http://prepare") as http:
        result = await route_probe(_world(), http, route)
    assert result.ok is not leaky, result


def _console(leaky: bool) -> httpx.MockTransport:
    """A fake console whose refusal page names the session's space when ``leaky``."""

    def handle(request: httpx.Request) -> httpx.Response:
        sid = request.url.path.split("/")[3]
        where = " (space probe-a-t)" if leaky and sid == "ses_a" else ""
        return httpx.Response(404, text=f"<p>session {sid} not found{where}</p>")

    return httpx.MockTransport(handle)


@pytest.mark.parametrize("leaky", [False, True])
async def test_the_console_probe_finds_a_leaky_page(leaky: bool) -> None:
    async with httpx.AsyncClient(transport=_console(leaky), base_url="http://console") as http:
        result = await page_probe(
            _world(), http, "console.session_of_a", "/inspector/sessions/{sid}"
        )
    assert result.ok is not leaky, result
    assert (result.observed == PAGE_LIKE_UNKNOWN) is not leaky


def test_results_are_plain_json() -> None:
    r = verdict("bus.unsigned", "bus", "a", "b")
    doc: dict[str, Any] = json.loads(json.dumps(r.__dict__))
    assert doc == {"name": "bus.unsigned", "surface": "bus", "expected": "a", "observed": "b",
                   "ok": False}  # fmt: skip


def test_no_secret_shows_in_a_repr() -> None:
    """A traceback or a log line that prints the probe's world, a broker login or a key
    just issued shows no key and no password; what they are for still shows."""
    w = _world(password="pw-of-b")
    issued = IssuedKey("kid0123", "alk_kid0123_secret", "space-s", KeyKind.HOST, None)
    login = KafkaAuth("SASL_SSL", "SCRAM-SHA-512", "probe-b-t", "pw-of-b")
    shown = {
        "world": repr(w),
        "victim": repr(w.a),
        "attacker": repr(w.b),
        "issued": repr(issued),
        "login": repr(login),
    }
    secrets = ["key-a", "key-b", "user-b", "revoked-b", "pw-of-b", "alk_kid0123_secret"]
    leaks = {k: found for k, text in shown.items() if (found := [s for s in secrets if s in text])}
    assert leaks == {}
    assert "probe-b-t" in shown["login"] and "kid0123" in shown["issued"]
    assert login.password == "pw-of-b" and issued.key == "alk_kid0123_secret"


@pytest.mark.parametrize("role", ["runtime", "processor", "admin"])
async def test_removing_a_runtime_never_removes_a_role_of_the_deployment(role: str) -> None:
    with pytest.raises(ValueError, match="role of the deployment"):
        await remove_runtime(Settings(), role)
