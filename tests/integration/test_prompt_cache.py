"""A 15-step question through the real stack, its provider requests replayed under the
providers' cache rules (issue 39; docs/prompt-caching.md, ``domain.caching.replay``):
each step's Anthropic request reads all of the previous one from the cache."""

from __future__ import annotations

import json

import pytest

from domain.caching.replay import AnthropicCache, IdealCache, OpenAICache, PromptCache, Tally
from domain.caching.requests import sent_request
from domain.context.providers import render
from schemas.contracts import ToolStatus
from services.sdk.client import ContextClient
from storage.tokenizers import make_counter
from tests.integration.test_compaction import padded
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration

STEPS = 15
STEP_S = 20.0  # seconds between two model calls of the loop
PROFILE = {
    "name": "claude-sonnet",
    "context_capacity": 200_000,
    "output_reserve": 8_000,
    "safety_margin": 2_000,
    "provider_format": "anthropic_messages",
    "cache_min_tokens": 1_024,
}


async def question(c: ContextClient) -> list[dict[str, object]]:
    """The prepared contexts of one question: before each of its model calls."""
    session = await new_session(
        c, instructions=padded("You are the build agent.", 1_100), model_profile=PROFILE
    )
    run = await c.start_run(session)
    await c.append_user(run, "Why does the nightly build fail on arm64?", "q")
    out = []
    for k in range(STEPS):
        out.append(await c.prepare(run, render=True))
        call = (f"c{k}", "read_file", json.dumps({"path": f"src/m{k}.py"}))
        await c.append_model_result(run, f"Step {k}: reading src/m{k}.py.", f"m{k}", [call])
        result = padded(f"src/m{k}.py: {k * 40} lines", 150)
        await c.append_tool_outcome(run, f"c{k}", "read_file", result, ToolStatus.OK)
    out.append(await c.prepare(run, render=True))
    return out


def replay(cache: PromptCache, fmt: str, prepared: list[dict[str, object]]) -> list[Tally]:
    count = make_counter("cl100k_base").count
    tallies = []
    for i, p in enumerate(prepared):
        provider = p["provider"]
        assert isinstance(provider, dict) and provider["format"] == "anthropic_messages"
        body = provider["request"]
        if fmt != "anthropic_messages":  # the same prepared context in the other format
            body = render(p["messages"], p["tools"], fmt)  # type: ignore[arg-type]
        tallies.append(cache.send(sent_request(body, fmt, count, at_s=i * STEP_S)))
    return tallies


def share(tallies: list[Tally]) -> float:
    total = sum(tallies[1:], Tally())  # the question's first call finds a cold cache
    return total.read / total.total


@pytest.mark.spec("R4.3")
async def test_each_step_of_a_15_step_question_reads_the_previous_step_from_the_cache(
    services: Services,
) -> None:
    async with client(services) as c:
        prepared = await question(c)
    requests = [p["provider"]["request"] for p in prepared]  # type: ignore[index]
    count = make_counter("cl100k_base").count
    sents = [sent_request(r, "anthropic_messages", count) for r in requests]
    anthropic = replay(AnthropicCache(), "anthropic_messages", prepared)
    for before, now, tally in zip(sents, sents[1:], anthropic[1:], strict=False):
        # the mark on the conversation's last block: all of the previous request is read
        assert before.marks[-1] == len(before.blocks) - 1
        assert tally.read == sum(b.tokens for b in before.blocks)
        assert 2 <= len(now.marks) <= 4
    shares = {
        "ideal": share(replay(IdealCache(), "anthropic_messages", prepared)),
        "anthropic_messages": share(anthropic),
        "openai_chat": share(replay(OpenAICache(), "openai_chat", prepared)),
    }
    print("cached share of steps 2-16:", {k: f"{v:.1%}" for k, v in shares.items()})
    assert shares["anthropic_messages"] == shares["ideal"] > 0.9
    assert 0.9 < shares["openai_chat"] <= shares["ideal"]
