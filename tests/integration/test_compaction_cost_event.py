"""Real stack (R18): a compaction of a priced release publishes its summarizer calls as
one ``model_call`` observability event under purpose ``compaction``, with the tokens the
model reported and their exact cost. The summarizer is the OpenAI-compatible adapter
against a scripted model that reports 10 prompt and 5 completion tokens a call. The
built-in extractive summarizer runs no model: its job bills nothing (issue 39)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from schemas.wire import ObservabilityEvent, decode_observability
from services.sdk.client import ContextClient
from tests.integration.test_compaction import question, settled
from tests.support.flows import PROFILE, client, new_session, read_topic
from tests.support.model_server import Script
from tests.support.services import Services

pytestmark = pytest.mark.integration
PRICES = {"input": 2.5, "output": 10, "currency": "USD"}
OPUS = {"input": 15, "cached_input": 1.5, "cache_write": 18.75, "output": 75}


@pytest.fixture
async def ctx(scripted: tuple[Services, Script]) -> AsyncIterator[ContextClient]:
    async with client(scripted[0]) as c:
        yield c


async def compaction_events(
    services: Services, sid: str, kind: str = "model_call"
) -> list[ObservabilityEvent]:
    """The session's events of ``kind`` and purpose compaction, once there is one."""
    found: list[ObservabilityEvent] = []
    for _ in range(30):
        found = await session_events(services, sid, kind)
        if found:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"no {kind} event of purpose compaction")


async def session_events(services: Services, sid: str, kind: str) -> list[ObservabilityEvent]:
    return [
        e
        for e in (
            decode_observability(v)
            for _, v in await read_topic(
                services.stack.kafka_bootstrap,
                services.env("ALC_TOPIC_OBSERVABILITY"),
                want=1_000_000,
                timeout=1,
            )
        )
        if e.session_id == sid and e.kind == kind and e.purpose == "compaction"
    ]


@pytest.mark.spec("R18")
async def test_a_priced_compaction_publishes_its_tokens_and_exact_cost(
    scripted: tuple[Services, Script], ctx: ContextClient, db: asyncpg.Pool
) -> None:
    services, script = scripted
    policy: dict[str, Any] = {"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
    session = await new_session(
        ctx, model_profile={**PROFILE, "prices": PRICES}, context_policy=policy
    )
    hits = script.hits
    run = await question(ctx, session, "o", rounds=2)
    await ctx.finish_run(run)
    run = await question(ctx, session, "p")
    await ctx.prepare(run)
    (job,) = await settled(db, session["session_id"])
    assert job["status"] == "committed"
    (ev,) = await compaction_events(services, session["session_id"])
    calls = script.hits - hits
    assert calls == 1 and ev.model_calls == 1 and ev.job_id == job["job_id"]
    assert ev.budget_items == {
        "input_tokens": 10,
        "fresh_input_tokens": 10,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 5,
        "reasoning_tokens": 0,
    }
    # 10 * 2.5 + 5 * 10 = 75 USD per million tokens = 0.000075 USD = 75,000,000 pico-USD
    assert (ev.cost_picos, ev.currency) == (75_000_000, "USD")


@pytest.mark.spec("R18")
async def test_an_extractive_compaction_bills_nothing(services: Services, db: asyncpg.Pool) -> None:
    policy: dict[str, Any] = {"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
    async with client(services) as ctx:
        session = await new_session(
            ctx, model_profile={**PROFILE, "prices": OPUS}, context_policy=policy
        )
        run = await question(ctx, session, "o", rounds=2)
        await ctx.finish_run(run)
        run = await question(ctx, session, "p")
        await ctx.prepare(run)
    sid = session["session_id"]
    (job,) = await settled(db, sid)
    assert job["status"] == "committed"
    # The processor's note of the commit carries what the job covered and wrote, by our
    # count; the compaction service published no model_call (it is sent before the
    # outcome, on the same partition, so it would be there by now).
    (done,) = await compaction_events(services, sid, "compaction_finished")
    assert done.covered_tokens and done.summary_tokens
    assert await session_events(services, sid, "model_call") == []
