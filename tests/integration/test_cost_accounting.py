"""Issue 27 (2) on the real stack: a model profile's prices, the provider's usage as it
reports it (OpenAI and Anthropic shapes, cached tokens) and the call's stored cost."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tests.support.flows import PROFILE, client, new_session, wait_committed
from tests.support.services import Services

pytestmark = pytest.mark.integration

PRICES = {"input": 3, "cached_input": 0.3, "cache_write": 3.75, "output": 15}


async def _report(services: Services, db: asyncpg.Pool, usage: dict[str, Any]) -> Any:
    async with client(services) as c:
        session = await new_session(c, model_profile=PROFILE | {"prices": PRICES})
        run = await c.start_run(session)
        p, o = await c.append_user(run, "What is the weather?", "q")
        await wait_committed(db, services, {p: o})
        prepared = await c.prepare(run, purpose="completion")
        call = await c.check_model_call(run, prepared)
        await c.report_model_result(run, call["call_id"], {"content": "Sunny."}, usage)
    return await db.fetchval("SELECT usage FROM model_calls WHERE call_id=$1", call["call_id"])


async def test_anthropic_cached_usage_is_stored_with_its_exact_cost(
    services: Services, db: asyncpg.Pool
) -> None:
    usage = await _report(
        services,
        db,
        {
            "input_tokens": 100,
            "cache_read_input_tokens": 800,
            "cache_creation_input_tokens": 100,
            "output_tokens": 50,
        },
    )
    assert usage["input_tokens"] == 1000  # calibration compares all input
    assert (usage["cached_input_tokens"], usage["cache_write_tokens"]) == (800, 100)
    assert usage["cache_share"] == 0.8
    # 100*3 + 800*0.3 + 100*3.75 + 50*15 = 1665 per million tokens
    assert usage["cost"] == "0.001665" and usage["currency"] == "USD"


async def test_openai_cached_usage_is_stored_with_its_exact_cost(
    services: Services, db: asyncpg.Pool
) -> None:
    usage = await _report(
        services,
        db,
        {
            "prompt_tokens": 1000,
            "completion_tokens": 50,
            "prompt_tokens_details": {"cached_tokens": 800},
        },
    )
    assert (usage["fresh_input_tokens"], usage["cached_input_tokens"]) == (200, 800)
    # 200*3 + 800*0.3 + 50*15 = 1590 per million tokens
    assert usage["cost"] == "0.00159"
