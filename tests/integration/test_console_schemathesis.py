"""Schemathesis over the console's OpenAPI document (issue 25, finding 9: 33 of its
cases were 500s, all of one cause), against the real console server signed in like a
browser — the session cookie and its CSRF token on every case, so the cases reach the
handlers rather than the sign-in redirect.

Valid requests and requests that break the document on purpose: never a 5xx, and every
status one the document lists for the operation (the redirect to sign-in and the
refusals included). Not the content type: a refusal is an HTML page, an error body
JSON. The settings of the Prepare test (tests/integration/test_schemathesis.py):
``MAX_EXAMPLES`` per operation, both modes, no shrinking; ~13 operations in well under a
minute. Sign-out is left out: it would end the session every later case runs under.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import status_code_conformance

from services.console.app import create_app
from services.console.settings import ConsoleSettings
from tests.support.console import sign_in
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration
MAX_EXAMPLES = 20
BUDGET_S = 60.0

schema = schemathesis.openapi.from_dict(create_app(ConsoleSettings()).openapi()).exclude(
    path="/logout"
)
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=MAX_EXAMPLES
)

CHECKS = [not_a_server_error, status_code_conformance]

# The signed-in browser and real ids, filled by ``signed_in`` before any case is drawn.
SEED: dict[str, Any] = {}
STARTED: list[float] = []


@schema.hook
def flatmap_case(_: Any, case: schemathesis.Case) -> st.SearchStrategy[schemathesis.Case]:
    def with_real_ids(use: bool) -> schemathesis.Case:
        if not use or not SEED:
            return case
        for name in case.path_parameters or {}:
            if name in SEED["path"]:
                case.path_parameters[name] = SEED["path"][name]  # type: ignore[index]
        if isinstance(case.query, dict) and "release" in case.query:
            case.query["release"] = SEED["path"]["release_id"]
        return case

    return st.sampled_from([False, False, True]).map(with_real_ids)


@pytest.fixture(scope="module")
async def signed_in(console: str, services: Services) -> AsyncIterator[None]:
    async with client(services) as c:
        session = await new_session(c)
    async with httpx.AsyncClient(base_url=console) as http:
        token = await sign_in(http, services.api_key)
        cookie = "; ".join(f"{k}={v}" for k, v in http.cookies.items())
    SEED.update(
        headers={"Cookie": cookie, "X-CSRF-Token": token},
        path={"release_id": session["release_id"], "session_id": session["session_id"]},
    )
    yield
    SEED.clear()


@pytest.fixture(scope="module")
def budget() -> Iterator[None]:
    STARTED.append(time.monotonic())
    yield
    elapsed = time.monotonic() - STARTED[0]
    print(f"[schemathesis console] {elapsed:.0f}s for the run (aim: under {BUDGET_S}s)")


@pytest.mark.spec("R16", "R3.3", "R17", "R18")
@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_no_server_error(
    case: schemathesis.Case, console: str, signed_in: None, budget: None
) -> None:
    case.call_and_validate(base_url=console, headers=SEED["headers"], checks=CHECKS, timeout=15)
