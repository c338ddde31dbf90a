"""Issue 27 (2) on the real stack: a priced release's model calls, one reported with
Anthropic-shaped cached usage, show their tokens by kind, cache share and cost in the web
inspector (the real console server) and in ``agentloom session inspect`` (the installed
command), with the session's total; a call without a result says so."""

from __future__ import annotations

import re
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support.console import session_inspect, sign_in
from tests.support.flows import PROFILE, client, new_session, wait_committed
from tests.support.services import Services

pytestmark = pytest.mark.integration
PRICES = {"input": 3, "cached_input": 0.3, "cache_write": 3.75, "output": 15, "currency": "USD"}
FIRST = {
    "input_tokens": 100,
    "cache_read_input_tokens": 800,
    "cache_creation_input_tokens": 100,
    "output_tokens": 50,
}
SECOND = {
    "input_tokens": 200,
    "cache_read_input_tokens": 1000,
    "cache_creation_input_tokens": 0,
    "output_tokens": 20,
}
# Per million tokens, by literal arithmetic over PRICES:
# first:  100*3 + 800*0.3 + 100*3.75 + 50*15 = 300 + 240 + 375 + 750 = 1665 → 0.001665 USD
# second: 200*3 + 1000*0.3 + 0*3.75 + 20*15 = 600 + 300 + 0 + 300 = 1200 → 0.0012 USD
# total:  1665 + 1200 = 2865 → 0.002865 USD
FIRST_COST, SECOND_COST, TOTAL = "0.001665 USD", "0.0012 USD", "0.002865 USD"
# Cache share: 800 / (100 + 800 + 100) = 80.0%; 1000 / (200 + 1000) = 83.3%
FIRST_SHARE, SECOND_SHARE = "80.0%", "83.3%"


async def _session(services: Services, db: asyncpg.Pool) -> tuple[str, list[str]]:
    """A priced session with three calls: two reported with cached usage, one not."""
    async with client(services) as c:
        session = await new_session(c, model_profile=PROFILE | {"prices": PRICES})
        run = await c.start_run(session)
        ids = []
        for n, usage in enumerate((FIRST, SECOND, None)):
            p, o = await c.append_user(run, f"Question {n}?", f"q{n}")
            await wait_committed(db, services, {p: o})
            prepared = await c.prepare(run, purpose="completion")
            call = await c.check_model_call(run, prepared)
            ids.append(call["call_id"])
            if usage is not None:
                await c.report_model_result(run, call["call_id"], {"content": "Sunny."}, usage)
    return str(session["session_id"]), ids


def _text(html: str, ident: str) -> str:
    m = re.search(rf'id="{ident}"[^>]*>(.*?)</', html, re.S)
    assert m, f"no #{ident} on the page"
    return " ".join(m.group(1).split())


@pytest.mark.spec("R18")
async def test_the_inspector_and_session_inspect_show_tokens_cache_share_and_cost(
    services: Services, db: asyncpg.Pool, pg_dsn: str, console: str
) -> None:
    sid, (first, second, pending) = await _session(services, db)
    async with httpx.AsyncClient(base_url=console, timeout=30) as http:
        await sign_in(http, services.api_key)
        page = await http.get(f"/inspector/sessions/{sid}/calls/{first}")
        assert page.status_code == 200, page.text
        assert (_text(page.text, "cost"), _text(page.text, "cache-share")) == (
            FIRST_COST,
            FIRST_SHARE,
        )
        cells = re.findall(r"<td>(\d+)</td>", page.text.split('id="usage"')[1].split("</table>")[0])
        assert cells == ["100", "800", "100", "50", "0"]  # fresh, cached, write, out, reasoning
        none_yet = await http.get(f"/inspector/sessions/{sid}/calls/{pending}")
        assert _text(none_yet.text, "cost") == "no result yet"
        listing = await http.get(f"/inspector/sessions/{sid}")
        assert listing.status_code == 200, listing.text
        rows: dict[str, Any] = {}
        for call_id in (first, second, pending):
            row = listing.text.split(f">{call_id}</a>")[1].split("</tr>")[0]
            rows[call_id] = re.findall(r'class="(?:cache-share|cost)">([^<]*)<', row)
        assert rows == {
            first: [FIRST_SHARE, FIRST_COST],
            second: [SECOND_SHARE, SECOND_COST],
            pending: ["—", "no result yet"],
        }
        assert f'data-currency="USD">{TOTAL}</span> (2 priced calls)' in listing.text
    listed = session_inspect(pg_dsn, sid)
    assert f"session cost: {TOTAL} (2 priced)" in listed
    for text in (FIRST_COST, SECOND_COST, FIRST_SHARE, SECOND_SHARE, "no result yet"):
        assert text in listed, listed
    shown = session_inspect(pg_dsn, sid, "--call", "1")
    assert f"cache share: {FIRST_SHARE}; cost: {FIRST_COST}" in shown, shown
    assert "fresh input 100, cached input 800, cache write 100, output 50, reasoning 0" in shown
    pending_shown = session_inspect(pg_dsn, sid, "--call", pending)
    assert "cache share: —; cost: no result yet" in pending_shown, pending_shown
