"""The hostile-tenant probe on Prepare's API: tenant B's host key (naming A's actor, for
good measure) on every route that takes an id of A's, compared with the same request for
ids that exist nowhere — docs/security.md: another space's session, call, release or blob
is 404 exactly like an unknown id, naming nothing of it; the one documented existence
signal is the 409 of a taken release id. Then requests without a usable key."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from devstack.probe_world import Answer, ProbeResult, World, release_body, verdict


@dataclass(frozen=True)
class Route:
    """One operation of the API and the request that names A's ids in it; ``{sid}``,
    ``{run}``... are filled from A's ids, or from ids nobody has."""

    name: str
    method: str
    path: str  # as the OpenAPI document names it
    url: str
    body: dict[str, Any] | None = None


ROUTES = (
    Route("http.get_session", "get", "/v1/sessions/{session_id}", "/v1/sessions/{sid}"),
    Route("http.start_run", "post", "/v1/sessions/{session_id}/runs",
          "/v1/sessions/{sid}/runs", {}),
    Route("http.resume_run", "post", "/v1/sessions/{session_id}/runs/{run_id}/resume",
          "/v1/sessions/{sid}/runs/{run}/resume", {}),
    Route("http.finish_run", "post", "/v1/sessions/{session_id}/runs/{run_id}/finish",
          "/v1/sessions/{sid}/runs/{run}/finish", {}),
    Route("http.prepare", "post", "/v1/sessions/{session_id}/runs/{run_id}/prepare",
          "/v1/sessions/{sid}/runs/{run}/prepare", {}),
    Route("http.model_call", "post", "/v1/sessions/{session_id}/runs/{run_id}/model-calls",
          "/v1/sessions/{sid}/runs/{run}/model-calls", {"prepared_id": "{prepared}"}),
    Route("http.model_result", "post", "/v1/sessions/{session_id}/model-calls/{call_id}/result",
          "/v1/sessions/{sid}/model-calls/{call}/result", {}),
    Route("http.event_outcome", "get", "/v1/sessions/{session_id}/events/{event_key}",
          "/v1/sessions/{sid}/events/{event}"),
    Route("http.read_record", "get", "/v1/sessions/{session_id}/records/{record_id}",
          "/v1/sessions/{sid}/records/{record}"),
    Route("http.grant", "post", "/v1/sessions/{session_id}/grants",
          "/v1/sessions/{sid}/grants", {"actor_id": "{attacker}"}),
    Route("http.revoke_grant", "delete", "/v1/sessions/{session_id}/grants/{actor_id}",
          "/v1/sessions/{sid}/grants/{actor}"),
    Route("http.diagnostics_call", "get", "/v1/diagnostics/{call_or_prepared_id}",
          "/v1/diagnostics/{call}"),
    Route("http.diagnostics_prepared", "get", "/v1/diagnostics/{call_or_prepared_id}",
          "/v1/diagnostics/{prepared}"),
    Route("http.get_release", "get", "/v1/releases/{release_id}", "/v1/releases/{release}"),
    Route("http.rollups_of_a", "get", "/v1/analytics/rollups",
          "/v1/analytics/rollups?space={space}"),
)  # fmt: skip
# Operations no id of another space reaches: they act in the key's own space (a blob is
# content-addressed in it; a release or session it opens is its own: see the last probes).
OWN_SPACE_ONLY = {("post", "/v1/releases"), ("post", "/v1/sessions"), ("put", "/v1/blobs")}


def a_ids(w: World) -> dict[str, str]:
    a = w.a
    return {
        "sid": a.run.session_id,
        "run": a.run.run_id,
        "prepared": a.prepared_id,
        "call": a.call_id,
        "event": a.event_key,
        "record": a.record_id,
        "actor": a.actor,
        "release": a.release_id,
        "space": a.space,
        "attacker": w.b.actor,
    }


def unknown_ids(ids: dict[str, str]) -> dict[str, str]:
    """Ids of the same shape that exist nowhere (the attacker's own actor kept)."""
    return {k: v if k == "attacker" else f"x{uuid.uuid4().hex[:12]}" for k, v in ids.items()}


def _fill(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    return value


def _normal(text: str, ids: dict[str, str]) -> str:
    for k, v in sorted(ids.items(), key=lambda kv: -len(kv[1])):
        if k != "attacker":
            text = text.replace(v, f"<{k}>")
    return text


def _head(status: int, code: str | None) -> str:
    return f"{status} {code}" if code else str(status)


def alike(status: int, code: str | None) -> str:
    """The observation of an answer with this status and error code that tells nothing
    of A: what ``like_unknown`` says when the probe finds nothing."""
    return f"{_head(status, code)}, like an unknown id, naming nothing of A"


def like_unknown(
    foreign: Answer,
    unknown: Answer,
    ids: dict[str, str],
    nowhere: dict[str, str],
    secrets: list[str],
    want: tuple[int, str | None] = (404, "not_found"),
    noun: str = "answer",
) -> str:
    """How B's answer (or console page) for A's ids compares with the one for ids nobody
    has: the probe's observation (``alike(*want)`` when nothing tells A's ids from
    made-up ones; else the status, a difference, or the secrets of A it names)."""
    head = _head(*want)
    if (foreign.status, foreign.code) != want:
        return _head(foreign.status, foreign.code)
    if _normal(foreign.text, ids) != _normal(unknown.text, nowhere):
        return f"{head}, unlike an unknown id's {noun}"
    named = [s for s in secrets if s in foreign.text]
    return f"{head}, naming {named}" if named else alike(*want)


LIKE_UNKNOWN = alike(404, "not_found")


def _request(route: Route, ids: dict[str, str]) -> tuple[str, Any]:
    return _fill(route.url, ids), _fill(route.body, ids)


async def _ask(http: httpx.AsyncClient, route: Route, ids: dict[str, str]) -> Answer:
    url, body = _request(route, ids)
    return Answer.of(await http.request(route.method.upper(), url, json=body))


def secrets_of(w: World) -> list[str]:
    """What only A's space holds: in an answer to B, a leak (unless B sent it itself)."""
    return [w.secret, w.a.space, w.a.actor, w.a.agent]


async def route_probe(w: World, http: httpx.AsyncClient, route: Route) -> ProbeResult:
    ids = a_ids(w)
    nowhere = unknown_ids(ids)
    foreign, unknown = await _ask(http, route, ids), await _ask(http, route, nowhere)
    sent = f"{_request(route, ids)} {http.headers}"
    secrets = [s for s in secrets_of(w) if s not in sent]
    observed = like_unknown(foreign, unknown, ids, nowhere, secrets)
    return verdict(route.name, "http", LIKE_UNKNOWN, observed)


async def coverage(w: World) -> ProbeResult:
    """Every operation of the published API that takes an id is probed above."""
    async with w.http(None) as http:
        doc = (await http.get("/openapi.json")).json()
    ops = {(m, p) for p, item in doc["paths"].items() for m in item if p.startswith("/v1/")}
    missing = sorted(ops - {(r.method, r.path) for r in ROUTES} - OWN_SPACE_ONLY)
    return verdict("http.every_route_probed", "http", "missing []", f"missing {missing}")


def unauthenticated(a: Answer, bearer: str | None) -> str:
    challenge = f", WWW-Authenticate {bearer}" if a.status == 401 else ""
    return f"{a.status} {a.code}{challenge}"


async def credential_probe(w: World, name: str, key: str | None) -> ProbeResult:
    """A's session asked with no key, a malformed one or a revoked one."""
    async with w.http(key) as http:
        r = await http.get(f"/v1/sessions/{w.a.run.session_id}")
    observed = unauthenticated(Answer.of(r), r.headers.get("www-authenticate"))
    return verdict(name, "http", "401 unauthenticated, WWW-Authenticate Bearer", observed)


async def taken_release(w: World, http: httpx.AsyncClient) -> ProbeResult:
    """B publishes under A's release id: the documented 409, and nothing of A's release."""
    body = release_body("agent-b", "B's copy", release_id=w.a.release_id)
    a = Answer.of(await http.post("/v1/releases", json=body))
    named = [s for s in secrets_of(w) if s in a.text]
    observed = f"{a.status} {a.code}, naming {named}"
    return verdict("http.taken_release_id", "http", "409 release_conflict, naming []", observed)


async def taken_session_id(w: World, http: httpx.AsyncClient) -> ProbeResult:
    """B opens a session under A's session id: a session of B's own (another global id),
    and A's session unchanged for A. Run last: B's name then means B's session."""
    body = {
        "space_id": w.b.space,
        "actor_id": w.b.actor,
        "release_id": w.b.release_id,
        "session_id": w.a.run.session_id,
    }
    r = await http.post("/v1/sessions", json=body)
    got = r.json() if r.status_code == 201 else {}
    own = got.get("space_id") == w.b.space and got.get("session_id") != w.a.run.session_id
    async with w.http(w.a.key) as as_a:
        mine = (await as_a.get(f"/v1/sessions/{w.a.run.session_id}")).json()
    still = mine.get("space_id") == w.a.space
    observed = f"{r.status_code}, B's own session: {own}, A's still A's: {still}"
    expected = "201, B's own session: True, A's still A's: True"
    return verdict("http.taken_session_id", "http", expected, observed)


async def http_probes(w: World, report: Callable[[ProbeResult], None]) -> list[ProbeResult]:
    out: list[ProbeResult] = []

    def done(r: ProbeResult) -> None:
        out.append(r)
        report(r)

    done(await coverage(w))
    async with w.http(w.b.key, **{"X-AgentLoom-Actor": w.a.actor}) as http:
        for route in ROUTES:
            done(await route_probe(w, http, route))
    for name, key in (
        ("http.no_key", None),
        ("http.malformed_key", "not-a-key"),
        ("http.revoked_key", w.b.revoked_key),
    ):
        done(await credential_probe(w, name, key))
    async with w.http(w.b.key) as http:
        done(await taken_release(w, http))
    return out


async def last_probes(w: World, report: Callable[[ProbeResult], None]) -> list[ProbeResult]:
    """What changes how B's names resolve: after every other probe."""
    async with w.http(w.b.key) as http:
        r = await taken_session_id(w, http)
    report(r)
    return [r]
