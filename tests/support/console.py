"""The web console under test: ``python -m services.console`` as a subprocess bound to
the test services (as the browser tests run it), and signing in over plain HTTP the way
a browser does — the sign-in page's token and pre-session cookie, then the session's
CSRF token from a page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from devstack.launcher import Proc
from devstack.serve import console_dsn
from tests.support.services import LOG_DIR, Services, free_port
from tests.support.stack import REPO

_TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')
_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


@contextmanager
def running_console(services: Services, **env: str) -> Iterator[str]:
    """The console's base URL while it runs; ``env``: extra ALC_CONSOLE_* settings."""
    port = free_port()
    full = {
        **os.environ,
        "ALC_CONSOLE_PORT": str(port),
        "ALC_CONSOLE_PREPARE_URL": services.prepare_url,
        "ALC_CONSOLE_PG_DSN": console_dsn(services.settings_env),
        "PYTHONUNBUFFERED": "1",
        **env,
    }
    proc = Proc(
        f"console-{port}",
        [sys.executable, "-m", "services.console"],
        full,
        LOG_DIR / services.env("ALC_PROCESSOR_ID"),
        health_url=f"http://127.0.0.1:{port}/healthz",
        cwd=REPO,
    )
    proc.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def form_token(html: str) -> str:
    m = _TOKEN.search(html)
    assert m, "no csrf_token field on the page"
    return m.group(1)


def page_token(html: str) -> str:
    m = _META.search(html)
    assert m, "no csrf-token meta on the page"
    return m.group(1)


async def sign_in(http: httpx.AsyncClient, key: str) -> str:
    """Sign ``http`` (cookies kept) in with ``key``; the session's CSRF token."""
    login = await http.get("/login")
    r = await http.post(
        "/login", data={"api_key": key, "next": "/inspector", "csrf_token": form_token(login.text)}
    )
    assert r.status_code == 303, r.text
    page = await http.get("/inspector")
    assert page.status_code == 200, page.text
    return page_token(page.text)


AGENTLOOM = str(Path(sys.executable).with_name("agentloom"))


def session_inspect(pg_dsn: str, *args: str) -> str:
    """What ``agentloom session inspect`` prints (the installed command, a wide terminal)."""
    p = subprocess.run(
        [AGENTLOOM, "session", "inspect", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"COLUMNS": "250", "ALC_PG_DSN": pg_dsn},
    )
    assert p.returncode == 0, p.stderr
    return p.stdout
