"""The hostile-tenant probe on the web console: tenant B signs in with its own host key
the way a browser does (the sign-in page's token and pre-session cookie) and asks for A's
session, call and record pages, a dry run of A's session on A's release, and B's own
lists; then it posts a state change without its CSRF token. docs/security.md and
console-security.md: another space's page is refused like an unknown one, showing
nothing of it; every state-changing request needs the session's CSRF token."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx

from devstack.probe_http import a_ids, alike, like_unknown, unknown_ids
from devstack.probe_world import Answer, ProbeResult, World, verdict

_TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')
_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')
PUBLISH = "/settings/context-compaction/publish"
LIKE_UNKNOWN = alike(404, None)  # a page: no error code


async def sign_in(http: httpx.AsyncClient, key: str) -> str | None:
    """Sign ``http`` (cookies kept) in with ``key``; the session's CSRF token, or None
    when the console refused the sign-in."""
    login = await http.get("/login")
    form = _TOKEN.search(login.text)
    data = {"api_key": key, "next": "/inspector", "csrf_token": form.group(1) if form else ""}
    if (await http.post("/login", data=data)).status_code != 303:
        return None
    found = _META.search((await http.get("/inspector")).text)
    return found.group(1) if found else None


def hidden(w: World) -> list[str]:
    """What only A holds and B never sends."""
    return [w.secret, w.a.agent, w.a.space]


async def page_probe(w: World, http: httpx.AsyncClient, name: str, path: str) -> ProbeResult:
    ids = a_ids(w)
    nowhere = unknown_ids(ids) | {"attacker": ids["attacker"]}
    foreign = Answer.of(await http.get(path.format(**ids)))
    unknown = Answer.of(await http.get(path.format(**nowhere)))
    observed = like_unknown(foreign, unknown, ids, nowhere, hidden(w), (404, None), "page")
    return verdict(name, "console", LIKE_UNKNOWN, observed)


async def dry_run_probe(w: World, http: httpx.AsyncClient) -> ProbeResult:
    """The settings page's preview on A's release and dry run of A's session."""
    ids = a_ids(w)
    nowhere = unknown_ids(ids)
    path = "/settings/context-compaction?release={release}&dry_run_session={sid}"
    foreign = Answer.of(await http.get(path.format(**ids)))
    unknown = Answer.of(await http.get(path.format(**nowhere)))
    observed = like_unknown(foreign, unknown, ids, nowhere, hidden(w), (200, None), "page")
    return verdict("console.dry_run_of_a", "console", alike(200, None), observed)


async def own_lists(w: World, http: httpx.AsyncClient) -> ProbeResult:
    """B's session list and analytics page: nothing of A on either."""
    pages = [await http.get("/inspector"), await http.get("/analytics")]
    seen = [s for r in pages for s in [*hidden(w), w.a.run.session_id] if s in r.text]
    observed = f"{[r.status_code for r in pages]}, naming {seen}"
    return verdict("console.own_lists", "console", "[200, 200], naming []", observed)


async def without_csrf(w: World, http: httpx.AsyncClient) -> list[ProbeResult]:
    """State changes without the session's token (none, a wrong one): refused, nothing
    published, the session still signed in."""
    form = {"release": w.b.release_id, "compaction.model_steps": "7"}
    out = []
    wrong = form | {"csrf_token": "0" * 64}
    for name, data in (
        ("console.publish_without_csrf", form),
        ("console.publish_wrong_csrf", wrong),
    ):
        a = Answer.of(await http.post(PUBLISH, data=data))
        published = "published-release" in a.text
        observed = f"{a.status} {a.code}, published: {published}"
        out.append(verdict(name, "console", "403 csrf_refused, published: False", observed))
    a = Answer.of(await http.post("/logout", data={}))
    still = (await http.get("/inspector")).status_code == 200
    observed = f"{a.status} {a.code}, still signed in: {still}"
    out.append(
        verdict(
            "console.logout_without_csrf",
            "console",
            "403 csrf_refused, still signed in: True",
            observed,
        )
    )
    return out


PAGES = (
    ("console.session_of_a", "/inspector/sessions/{sid}"),
    ("console.call_of_a", "/inspector/sessions/{sid}/calls/{call}"),
    ("console.record_of_a", "/inspector/sessions/{sid}/records/{record}"),
)


async def console_probes(w: World, report: Callable[[ProbeResult], None]) -> list[ProbeResult]:
    out: list[ProbeResult] = []

    def done(r: ProbeResult) -> None:
        out.append(r)
        report(r)

    async with httpx.AsyncClient(base_url=w.target.console_url, timeout=15) as http:
        token = await sign_in(http, w.b.key)
        done(
            verdict(
                "console.sign_in_as_b", "console", "signed in", "signed in" if token else "refused"
            )
        )
        if token is None:
            return out
        for name, path in PAGES:
            done(await page_probe(w, http, name, path))
        done(await dry_run_probe(w, http))
        done(await own_lists(w, http))
        for r in await without_csrf(w, http):
            done(r)
    return out
