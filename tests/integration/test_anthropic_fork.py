"""Real stack (issue 39 item 3, the Anthropic half): with ``ALC_SUMMARIZER=anthropic``
(the ``anthropic`` SDK against a scripted Messages server) and an agent on an Anthropic
Messages profile that also serves the ``compaction`` purpose, a job's summarizer request
is the agent's last rendered request — tools, system, messages and cache marks, byte for
byte — plus the instruction after its last block; the summary commits, and the job's
``model_call`` bills what the server reported read from the cache at the cached rate."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from devstack.anthropic_server import MessagesScript, anthropic_server, last_user_text
from services.compaction.wording import SYSTEM_PROMPT
from services.sdk.client import ContextClient
from tests.integration.test_compaction import question, settled
from tests.integration.test_compaction_cost_event import compaction_events
from tests.integration.test_model_summary_answers import segment_ids
from tests.support.flows import PROFILE, client, new_session
from tests.support.services import Services, start_services
from tests.support.stack import Stack

pytestmark = pytest.mark.integration
POLICY: dict[str, Any] = {"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
PRICES = {"input": "3", "cached_input": "0.3", "cache_write": "3.75", "output": "15"}
# A small cache minimum, so the test's short conversation carries its cache marks.
CLAUDE = {**PROFILE, "name": "claude-test", "provider_format": "anthropic_messages"} | {
    "cache_min_tokens": 100
}
END = len("]}]")  # the close of a request's last block, its message and the list


@pytest.fixture(scope="module")
def anthropic(stack: Stack, pg_dsn: str) -> Iterator[tuple[Services, MessagesScript]]:
    with anthropic_server() as (url, script):
        svc = start_services(
            stack,
            pg_dsn,
            ALC_SUMMARIZER="anthropic",
            ALC_SUMMARIZER_BASE_URL=url,
            ALC_SUMMARIZER_MODEL="claude-test",
            ALC_SUMMARIZER_API_KEY="sk-ant-integration",
            ALC_SUMMARIZER_TIMEOUT_S="5",
            ALC_COMPACTION_WAIT_S="20",
        )
        try:
            yield svc, script
        finally:
            svc.stop()


@pytest.fixture
async def ctx(anthropic: tuple[Services, MessagesScript]) -> AsyncIterator[ContextClient]:
    async with client(anthropic[0]) as c:
        yield c


@pytest.mark.spec("R11.3", "R18")
async def test_the_agents_anthropic_model_summarizes_from_the_agents_cached_request(
    anthropic: tuple[Services, MessagesScript], ctx: ContextClient, db: asyncpg.Pool
) -> None:
    services, script = anthropic
    session = await new_session(
        ctx, model_profile={**CLAUDE, "prices": PRICES}, context_policy=POLICY
    )
    sid = session["session_id"]
    run = await question(ctx, session, "f", rounds=2)
    rendered = [(await ctx.prepare(run, render=True))["provider"]["request"]]
    await ctx.finish_run(run)
    run = await question(ctx, session, "g")
    rendered.append((await ctx.prepare(run, render=True))["provider"]["request"])
    (job,) = await settled(db, sid)
    assert job["status"] == "committed", dict(job)
    with script.lock:
        (body,) = script.requests  # one segment, one call
        assert script.api_keys == ["sk-ant-integration"]
    # the agent's request, byte for byte up to the end of its last block (its marks
    # included), then the instruction: tools and system the same, no tool_choice
    sent = json.dumps(body["messages"])
    agent = next(r for r in rendered if sent.startswith(json.dumps(r["messages"])[:-END]))
    assert '"cache_control"' in json.dumps(agent["messages"])
    assert body["tools"] == agent["tools"] and body["system"] == agent["system"]
    assert "tool_choice" not in body and body["model"] == "claude-test"
    instruction = last_user_text(body)
    assert instruction.startswith(SYSTEM_PROMPT) and instruction not in json.dumps(agent)
    covered = await db.fetchval(
        "SELECT covered_record_ids FROM summary_revisions WHERE job_id=$1", job["job_id"]
    )
    assert set(segment_ids({"messages": [{"content": instruction}]})) == set(covered)
    # R18: the call's usage as the server reported it, 1,200 of its tokens from the cache
    (ev,) = await compaction_events(services, sid)
    assert ev.job_id == job["job_id"] and ev.model_calls == 1
    assert ev.budget_items == {
        "input_tokens": 1_240,
        "fresh_input_tokens": 40,
        "cached_input_tokens": 1_200,
        "cache_write_tokens": 0,
        "output_tokens": 30,
        "reasoning_tokens": 0,
    }
    # 40 * 3 + 1,200 * 0.3 + 30 * 15 = 930 USD per million tokens = 930,000,000 pico-USD
    assert (ev.cost_picos, ev.currency) == (930_000_000, "USD")
