"""Issue 27 (2) on the real stack: a priced release's model-call results with cached-token
usage show up in the analytics rollups (GET /v1/analytics/rollups) with their tokens by
kind, their cache-hit share and their exact cost.

The analytics service runs as its own process and consumer group (the ``analytics``
fixture, tests/integration/conftest.py).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from devstack.launcher import Proc
from services.sdk.client import ContextClient
from tests.support.flows import PROFILE, client, new_session, wait_committed
from tests.support.services import Services

pytestmark = pytest.mark.integration

# Per million tokens, USD.
PRICES = {"input": 3, "cached_input": 0.3, "cache_write": 3.75, "output": 15}
ANTHROPIC = {
    "input_tokens": 100,
    "cache_read_input_tokens": 800,
    "cache_creation_input_tokens": 100,
    "output_tokens": 50,
}
OPENAI = {
    "prompt_tokens": 1000,
    "completion_tokens": 50,
    "prompt_tokens_details": {"cached_tokens": 800},
    "completion_tokens_details": {"reasoning_tokens": 20},
}


@pytest.fixture
async def db(services: Services) -> asyncpg.Pool:
    p = await asyncpg.create_pool(services.env("ALC_PG_DSN"), min_size=1, max_size=2)
    yield p
    await p.close()


async def _call(c: ContextClient, run: Any, usage: dict[str, Any]) -> None:
    prepared = await c.prepare(run, purpose="completion")
    call = await c.check_model_call(run, prepared)
    await c.report_model_result(run, call["call_id"], {"content": "Sunny."}, usage)


async def _group(services: Services, agent: str, release_id: str) -> dict[tuple[str, str], Any]:
    """The agent's model_call rows of the completion purpose, once both calls are in:
    (metric, label) -> row."""
    headers = {"Authorization": f"Bearer {services.api_key}"}
    params = {"window": "1h", "agent": agent, "purpose": "completion"}
    deadline = asyncio.get_running_loop().time() + 60
    async with httpx.AsyncClient(base_url=services.prepare_url, headers=headers) as http:
        while True:
            r = await http.get("/v1/analytics/rollups", params=params)
            assert r.status_code == 200, r.text
            rows = {
                (x["metric"], x["label"]): x
                for x in r.json()["rows"]
                if x["release_id"] == release_id and x["model"] == PROFILE["name"]
            }
            calls = rows.get(("model_calls", ""), {}).get("value", 0)
            if calls >= 2:
                return rows
            assert asyncio.get_running_loop().time() < deadline, f"rollups: {rows}"
            await asyncio.sleep(0.3)


@pytest.mark.spec("R18", "R6.4")
async def test_cached_usage_shows_in_the_rollups_with_its_cache_share_and_exact_cost(
    services: Services, analytics: Proc, db: asyncpg.Pool
) -> None:
    agent = f"cost-agent-{uuid.uuid4().hex[:8]}"
    async with client(services) as c:
        session = await new_session(c, agent_id=agent, model_profile=PROFILE | {"prices": PRICES})
        run = await c.start_run(session)
        p, o = await c.append_user(run, "What is the weather?", "q")
        await wait_committed(db, services, {p: o})
        await _call(c, run, ANTHROPIC)
        await _call(c, run, OPENAI)

    rows = await _group(services, agent, session["release_id"])
    value = {k: row["value"] for k, row in rows.items()}
    assert value[("model_calls", "")] == 2
    # Anthropic: 100 fresh + 800 cached + 100 written; OpenAI: 1000 prompt, 800 cached.
    assert value[("usage_input_tokens", "")] == 1000 + 1000
    assert value[("usage_fresh_input_tokens", "")] == 100 + 200
    assert value[("usage_cached_input_tokens", "")] == 800 + 800
    assert value[("usage_cache_write_tokens", "")] == 100 + 0
    assert value[("usage_output_tokens", "")] == 50 + 50
    assert value[("usage_reasoning_tokens", "")] == 0 + 20
    assert rows[("usage_cached_input_tokens", "")]["cache_share"] == 0.8  # 1600 / 2000
    # Per million tokens: Anthropic 100*3 + 800*0.3 + 100*3.75 + 50*15 = 1665,
    # OpenAI 200*3 + 800*0.3 + 50*15 = 1590; together 3255 -> 0.003255 USD.
    assert value[("cost_picos", "USD")] == 3255 * 10**6
    assert rows[("cost_picos", "USD")]["cost"] == "0.003255"
    assert not [k for k in value if k[0] == "cost_picos" and k[1] != "USD"]
