"""The console cannot be forged (issue 25, finding 9), against the real console server
(``python -m services.console``) over the test stack: every state-changing request needs
its CSRF token and a same-origin Origin, sign-in too; the cookie is an opaque session id
that logout ends; every answer carries the security headers; bodies are bounded, a
connection must send its request in time, and a malformed body or id is a 4xx."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator

import asyncpg
import httpx
import pytest

from services.console import sealing
from services.console.session_store import SessionStore
from tests.support.console import form_token, running_console, sign_in
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration
TIMEOUT_S = 2.0  # the console's request deadline in this module
PATH = "/settings/context-compaction"


@pytest.fixture(scope="module")
def console(services: Services) -> Iterator[str]:
    with running_console(services, ALC_CONSOLE_REQUEST_TIMEOUT_S=str(TIMEOUT_S)) as url:
        yield url


@pytest.fixture
async def http(console: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=console, timeout=30) as h:
        yield h


@pytest.fixture(scope="module")
async def release_id(services: Services) -> str:
    async with client(services) as c:
        session = await new_session(c)
    return str(session["release_id"])


def _code(r: httpx.Response) -> str:
    return str(r.json()["error"]["code"])


def _publish_form(release: str, token: str | None) -> dict[str, str]:
    form = {"release": release, "compaction.model_steps": "7"}
    return form if token is None else form | {"csrf_token": token}


@pytest.mark.spec("R16", "R17", "R15.4")
async def test_a_state_change_without_the_csrf_token_is_refused(
    http: httpx.AsyncClient, services: Services, release_id: str
) -> None:
    token = await sign_in(http, services.api_key)
    for form in (_publish_form(release_id, None), _publish_form(release_id, "0" * 64)):
        r = await http.post(f"{PATH}/publish", data=form)
        assert r.status_code == 403 and _code(r) == "csrf_refused", r.text
        assert "published-release" not in r.text
    r = await http.post(f"{PATH}/validate", json={"release": release_id})
    assert r.status_code == 403 and _code(r) == "csrf_refused"
    r = await http.post(f"{PATH}/publish", data=_publish_form(release_id, token))
    assert r.status_code == 200 and 'id="published-release"' in r.text  # the token works


@pytest.mark.spec("R16", "R15.4")
async def test_a_state_change_from_another_origin_is_refused(
    http: httpx.AsyncClient, console: str, services: Services, release_id: str
) -> None:
    token = await sign_in(http, services.api_key)
    port = console.rsplit(":", 1)[1]
    sibling = f"http://127.0.0.1:{int(port) + 1}"  # same site, another port
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": sibling},
        {"Origin": "null"},
        {"Referer": "http://evil.example/page"},
    ):
        r = await http.post(
            f"{PATH}/publish", data=_publish_form(release_id, token), headers=headers
        )
        assert r.status_code == 403 and _code(r) == "origin_refused", (headers, r.text)
    r = await http.post(
        f"{PATH}/publish", data=_publish_form(release_id, token), headers={"Origin": console}
    )
    assert r.status_code == 200 and 'id="published-release"' in r.text


@pytest.mark.spec("R16", "R15.4")
async def test_a_forged_sign_in_is_refused(
    http: httpx.AsyncClient, console: str, services: Services
) -> None:
    # The attacker's page posts the attacker's key: no pre-session cookie, a token of
    # the attacker's own sign-in page, or no token at all.
    async with httpx.AsyncClient(base_url=console) as attacker:
        their_token = form_token((await attacker.get("/login")).text)
    await http.get("/login")  # the victim's browser has a pre-session cookie of its own
    for token in ("", their_token):
        r = await http.post("/login", data={"api_key": services.api_key, "csrf_token": token})
        assert r.status_code == 403 and _code(r) == "csrf_refused"
        assert "alc_console_session" not in r.headers.get("set-cookie", "")
    async with httpx.AsyncClient(base_url=console) as fresh:  # no cookie at all
        r = await fresh.post(
            "/login", data={"api_key": services.api_key, "csrf_token": their_token}
        )
        assert r.status_code == 403
    r = await http.post(
        "/login",
        data={"api_key": services.api_key, "csrf_token": "x"},
        headers={"Origin": "http://evil.example"},
    )
    assert r.status_code == 403 and _code(r) == "origin_refused"


@pytest.mark.spec("R16", "R15.4")
async def test_logout_ends_the_session_on_the_server(
    http: httpx.AsyncClient, console: str, services: Services
) -> None:
    token = await sign_in(http, services.api_key)
    stolen = dict(http.cookies)
    r = await http.post("/logout", data={"csrf_token": token})
    assert r.status_code == 303
    # The id the browser held (or anyone copied) no longer signs anybody in.
    async with httpx.AsyncClient(base_url=console, cookies=stolen) as thief:
        r = await thief.get("/inspector")
        assert r.status_code == 303 and r.headers["location"].startswith("/login")


@pytest.mark.spec("R16", "R15.4")
async def test_the_cookie_is_an_opaque_session_id_not_the_key(
    http: httpx.AsyncClient, services: Services, db: asyncpg.Pool
) -> None:
    login = await http.get("/login")
    r = await http.post(
        "/login", data={"api_key": services.api_key, "csrf_token": form_token(login.text)}
    )
    cookie = next(
        c for c in r.headers.get_list("set-cookie") if c.startswith("alc_console_session=")
    )
    assert services.api_key not in cookie
    key_parts = services.api_key.split("_")
    assert not any(part in cookie for part in key_parts if len(part) >= 8)
    attrs = cookie.lower()
    assert "httponly" in attrs and "samesite=strict" in attrs and "max-age=" in attrs
    rows = await db.fetch("SELECT id_hash, sealed_key FROM console_sessions")
    value = cookie.split(";")[0].split("=", 1)[1]
    assert rows and all(value.encode() not in bytes(r["id_hash"]) for r in rows)
    assert all(services.api_key.encode() not in bytes(r["sealed_key"]) for r in rows)


@pytest.mark.spec("R16")
async def test_every_answer_carries_the_security_headers(
    http: httpx.AsyncClient, services: Services
) -> None:
    await sign_in(http, services.api_key)
    answers = [
        await http.get("/login"),
        await http.get("/inspector"),
        await http.get("/static/console.js"),
        await http.get("/no-such-page"),
        await http.post(f"{PATH}/validate", json=[1]),
    ]
    for r in answers:
        h = r.headers
        assert h["x-frame-options"] == "DENY", r.url
        assert "frame-ancestors 'none'" in h["content-security-policy"]
        assert "script-src 'self'" in h["content-security-policy"]
        assert "unsafe-inline" not in h["content-security-policy"]
        assert h["x-content-type-options"] == "nosniff"
        assert h["referrer-policy"] == "same-origin"


@pytest.mark.spec("R16", "R3.3")
async def test_a_body_over_prepares_limit_is_413(
    http: httpx.AsyncClient, services: Services
) -> None:
    token = await sign_in(http, services.api_key)
    big = b"a=" + b"x" * (9 * 1024 * 1024)
    r = await http.post(
        f"{PATH}/publish",
        content=big,
        headers={"content-type": "application/x-www-form-urlencoded", "x-csrf-token": token},
    )
    assert r.status_code == 413 and _code(r) == "payload_too_large"
    assert r.headers["x-frame-options"] == "DENY"


def _held_open(console: str, sent: bytes) -> float:
    """Seconds until the console closed a connection that sent only ``sent``."""
    host, port = console.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S * 5) as s:
        started = time.monotonic()
        s.sendall(sent)
        while s.recv(4096):
            pass
        return time.monotonic() - started


@pytest.mark.spec("R16")
async def test_a_connection_with_unfinished_headers_is_closed_within_the_timeout(
    console: str,
) -> None:
    for sent in (b"GET /login HTTP/1.1\r\nHost: x\r\n", b"POST", b""):
        held = await asyncio.to_thread(_held_open, console, sent)
        assert held < TIMEOUT_S + 2.0, (sent, held)
    # A body promised and never sent is cut too.
    held = await asyncio.to_thread(
        _held_open, console, b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab"
    )
    assert held < TIMEOUT_S + 2.0


@pytest.mark.spec("R16", "R3.3")
async def test_a_json_body_that_is_a_list_or_a_scalar_is_422(
    http: httpx.AsyncClient, services: Services
) -> None:
    token = await sign_in(http, services.api_key)
    for body in ("[1, 2]", "3", '"text"', "null", "{not json", '{"release": 5}'):
        r = await http.post(
            f"{PATH}/validate",
            content=body,
            headers={"content-type": "application/json", "x-csrf-token": token},
        )
        assert r.status_code == 422 and _code(r) == "invalid_request", (body, r.text)
    r = await http.post(
        f"{PATH}/validate",
        content="a=b",
        headers={"content-type": "text/plain", "x-csrf-token": token},
    )
    assert r.status_code == 415 and _code(r) == "unsupported_media_type"


@pytest.mark.spec("R16", "R3.3")
async def test_a_release_or_id_that_is_a_path_is_4xx(
    http: httpx.AsyncClient, services: Services
) -> None:
    token = await sign_in(http, services.api_key)
    for value in ("../x", "..", "../../healthz", "a\x00b"):
        r = await http.get(PATH, params={"release": value})
        assert r.status_code == 422 and _code(r) == "invalid_request", (value, r.text)
        r = await http.post(f"{PATH}/publish", data={"release": value, "csrf_token": token})
        assert r.status_code == 422 and _code(r) == "invalid_request", (value, r.text)
        r = await http.post(
            f"{PATH}/validate", json={"release": value}, headers={"x-csrf-token": token}
        )
        assert r.status_code == 422 and _code(r) == "invalid_request", (value, r.text)
    r = await http.get("/inspector/sessions/..%2F..%2Fhealthz")
    assert 400 <= r.status_code < 500
    r = await http.get("/inspector/sessions/s1/records/r1", params={"offset": "-1x"})
    assert r.status_code == 422 and _code(r) == "invalid_request"


@pytest.mark.spec("R16", "R15.4")
async def test_a_session_ends_when_idle_and_at_its_absolute_end(
    db: asyncpg.Pool, services: Services
) -> None:
    idle = SessionStore(db, idle_s=0.5, max_s=60)
    sid = await idle.open(services.api_key)
    assert await idle.key_of(sid) == services.api_key
    await asyncio.sleep(0.3)
    assert await idle.key_of(sid) == services.api_key  # a request keeps it alive
    await asyncio.sleep(0.8)
    assert await idle.key_of(sid) is None
    absolute = SessionStore(db, idle_s=60, max_s=0.8)
    sid = await absolute.open(services.api_key)
    for _ in range(3):
        await asyncio.sleep(0.3)
        await absolute.key_of(sid)  # busy, yet ended at its absolute end
    assert await absolute.key_of(sid) is None
    assert await absolute.key_of(sealing.new_id()) is None


@pytest.mark.spec("R16", "R15.4")
async def test_over_https_the_cookies_are_secure_and_host_only(services: Services) -> None:
    with running_console(services, ALC_CONSOLE_SECURE_COOKIE="1") as url:
        async with httpx.AsyncClient(base_url=url) as http:
            r = await http.get("/login")
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("__Host-alc_console_login=")
    attrs = {a.strip().lower() for a in cookie.split(";")[1:]}
    assert {"secure", "httponly", "samesite=strict", "path=/"} <= attrs
    assert not any(a.startswith("domain=") for a in attrs)
